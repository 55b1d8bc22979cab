# Step 1's claims: each rank holds the whole model and a disjoint slice of the batch; the
# averaged gradient equals the whole-batch gradient; the copies end bit-identical.
expect '^\[rank 0\] rank 0 holds the whole model \(269322 parameters\) and rows \[0, 32\)' "rank 0 has rows 0-31"
expect '^\[rank 1\] rank 1 holds the whole model \(269322 parameters\) and rows \[32, 64\)' "rank 1 has rows 32-63"
for d in $(results gradient_difference); do
  holds "d < 1e-6" "averaged gradient equals the whole batch's (float rounding only)" d="$d"
done
expect_count 2 'whole-batch gradient' "both ranks compared"
prints=$(results fingerprint | sort -u | wc -l)
[[ $(results fingerprint | wc -l) -eq 2 ]] || fail "both ranks report their fingerprint"
[[ $prints -eq 1 ]] || fail "the two copies differ after training"
echo "ok: the two copies are bit-identical"
first=$(result loss_step_0)
last=$(result loss_step_40)
holds "last < first" "it learns" first="$first" last="$last"
