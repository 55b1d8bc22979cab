# Step 6's claims. Without Join, rank 0 runs out of data and calls the barrier that ends
# training while the others call step 4's all-reduce: the mismatch is reported at once,
# naming both calls, and the launcher stops the job. With Join the job ends:
# ranks 0 and 2 stand in for the steps they had no data for (2 and 1), every replica ends
# with the same weights, and they equal the closed form.
expect "^   \[rank 0\] rank 0: my 3 batches are done" "without Join: rank 0 ran out after 3 batches"
expect "^   \[rank [012]\] .*mismatched collectives: rank [012] called .*(barrier\(1 x int64\) #14|all_reduce\(AVG, 269322 x float32\) #14).*" "without Join: rank 0's barrier meets the others' all-reduce, named at once"
expect "^   launch: rank [012] \(pid [0-9]+\) exited with status 1; the other ranks were stopped" "without Join: the launcher stops the job"
expect_none "^   \[rank [12]\] rank [12]: finished" "without Join: no rank finished"
[[ "$(results shadowed | xargs)" == "2 0 1" ]] ||
  fail "with Join, ranks 0, 1, 2 should stand in for 2, 0, 1 steps: $(results shadowed | xargs)"
echo "ok: with Join: rank 0 shadowed 2 steps, rank 1 (the last to finish) none, rank 2 one"
[[ $(results weights | wc -l) -eq 3 && $(results weights | sort -u | wc -l) -eq 1 ]] ||
  fail "with Join: the three replicas should end bit-identical: $(results weights | xargs)"
echo "ok: with Join: the three replicas end bit-identical"
d=$(result closed_form_difference)
holds "d < 1e-6" "with Join: the result is the closed form" d="$d"
