# Step 5's claims, on 2 and 4 processes (the test runs 4: 16 rows each): naive DDP ends
# where the baseline ends (1e-5 relative: only the order of float additions differs), its
# last loss is the baseline's (to 1e-5), and the replicas are bit-identical.
for r in $(results relative_difference); do holds "r < 1e-5" "naive DDP = the baseline" r="$r"; done
[[ $(results last_loss | wc -l) -eq 4 ]] || fail "every rank should report its last loss"
paste <(results last_loss) <(results baseline_last_loss) | while read -r l b; do
  holds "(l - b) ^ 2 < 1e-10" "the last loss is the baseline's" l="$l" b="$b"
done
[[ $(results fingerprint | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
