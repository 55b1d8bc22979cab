# Step 4's claims, on 4 processes: both hand-written all-reduces equal the library's,
# exactly; the bytes each rank sent are the formulas': naive, rank 0 (n-1) S = 3 S and the
# others S (and rank 0 receives 3 S too); ring, every rank 2 (n-1)/n S = 1.5 S.
expect_count 4 'naive == library: yes, ring == library: yes' "both equal dist::all_reduce on every rank"
[[ "$(results naive_sent)" == "$(results naive_formula)" && "$(results ring_sent)" == "$(results ring_formula)" ]] ||
  fail "bytes sent differ from the formulas: naive $(results naive_sent | xargs) vs $(results naive_formula | xargs), ring $(results ring_sent | xargs) vs $(results ring_formula | xargs)"
[[ $(results ring_sent | wc -l) -eq 4 ]] || fail "all 4 ranks should report what they sent"
echo "ok: every rank sent what the formulas say"
S=$(result S)
holds "r0 == 3 * S" "naive: rank 0 sends 3 S" r0="$(result naive_sent)" S="$S"
holds "in0 == 3 * S" "naive: and receives 3 S" in0="$(result naive_received)" S="$S"
for r in $(results ring_sent); do holds "r == 1.5 * S" "ring: every rank sends 1.5 S" r="$r" S="$S"; done
