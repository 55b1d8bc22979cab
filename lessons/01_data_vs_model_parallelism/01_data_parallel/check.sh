# Step 1's claims: each rank holds the whole model and a disjoint slice of the batch; the
# averaged gradient equals the whole-batch gradient; the copies end bit-identical.
expect '^\[rank 0\] rank 0 holds the whole model \(269322 parameters\) and rows \[0, 32\)' "rank 0 has rows 0-31"
expect '^\[rank 1\] rank 1 holds the whole model \(269322 parameters\) and rows \[32, 64\)' "rank 1 has rows 32-63"
for d in $(fields 'gradient - whole-batch gradient\| = ([0-9.e+-]+)'); do
  holds "d < 1e-6" "averaged gradient equals the whole batch's (float rounding only)" d="$d"
done
expect_count 2 'whole-batch gradient' "both ranks compared"
prints=$(fields 'parameters ([0-9a-f]{16})$' | sort -u | wc -l)
[[ $(fields 'parameters ([0-9a-f]{16})$' | wc -l) -eq 2 ]] || fail "both ranks print their fingerprint"
[[ $prints -eq 1 ]] || fail "the two copies differ after training"
echo "ok: the two copies are bit-identical"
first=$(field 'step  0  loss ([0-9.]+)')
last=$(field 'step 40  loss ([0-9.]+)')
holds "last < first" "it learns" first="$first" last="$last"
