# Step 4's claims, on 4 processes: both hand-written all-reduces equal the library's,
# exactly; the bytes each rank sent are the formulas': naive, rank 0 (n-1) S = 3 S and the
# others S (and rank 0 receives 3 S too); ring, every rank 2 (n-1)/n S = 1.5 S.
expect_count 4 'naive == library: yes, ring == library: yes' "both equal dist::all_reduce on every rank"
while read -r sent formula rsent rformula s; do
  [[ $sent == "$formula" && $rsent == "$rformula" ]] || fail "bytes sent differ from the formulas: $sent vs $formula, $rsent vs $rformula"
done < <(grep -E 'sent [0-9]+ bytes naive' "$OUTPUT" | sed -E 's/.*sent ([0-9]+) bytes naive \(formula ([0-9]+)\), ([0-9]+) bytes ring \(formula 2\(n-1\)\/n S = ([0-9]+)\), S = ([0-9]+)/\1 \2 \3 \4 \5/')
S=$(field 'S = ([0-9]+)$')
r0=$(field '^\[rank 0\] rank 0: sent ([0-9]+) bytes naive')
holds "r0 == 3 * S" "naive: rank 0 sends 3 S" r0="$r0" S="$S"
in0=$(field '^\[rank 0\] rank 0: received ([0-9]+) bytes naive')
holds "in0 == 3 * S" "naive: and receives 3 S" in0="$in0" S="$S"
for r in $(fields 'bytes naive .*, ([0-9]+) bytes ring'); do holds "r == 1.5 * S" "ring: every rank sends 1.5 S" r="$r" S="$S"; done
