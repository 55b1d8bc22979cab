# Step 5's claims, on 2 and 4 processes (the test runs 4: 16 rows each): naive DDP ends
# where the baseline ends (1e-5 relative: only the order of float additions differs), its
# last loss is the baseline's (to 1e-5), and the replicas are bit-identical.
for r in $(fields 'max \|difference\| / max \|baseline\| = ([0-9.e+-]+)'); do holds "r < 1e-5" "naive DDP = the baseline" r="$r"; done
expect_count 4 'last loss' "every rank reported"
grep -E 'last loss' "$OUTPUT" | sed -E 's/.*last loss ([0-9.]+) \(baseline ([0-9.]+)\).*/\1 \2/' | while read -r l b; do
  holds "(l - b) ^ 2 < 1e-10" "the last loss is the baseline's" l="$l" b="$b"
done
[[ $(fields 'parameters ([0-9a-f]{16});' | sort -u | wc -l) -eq 1 ]] || fail "the replicas differ"
echo "ok: the replicas are bit-identical"
