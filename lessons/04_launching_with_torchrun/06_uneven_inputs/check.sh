# Step 6's claims. Without Join, rank 0 runs out of data and calls the barrier that ends
# training while the others call step 4's all-reduce: the mismatch is reported at once,
# naming both calls, and the launcher stops the job. With Join the job ends:
# ranks 0 and 2 stand in for the steps they had no data for (2 and 1), every replica ends
# with the same weights, and they equal the closed form.
expect "^   \[rank 0\] rank 0: my 3 batches are done" "without Join: rank 0 ran out after 3 batches"
expect "^   \[rank [012]\] .*mismatched collectives: rank [012] called .*(barrier\(1 x int64\) #12|all_reduce\(AVG, 269322 x float32\) #12).*" "without Join: rank 0's barrier meets the others' all-reduce, named at once"
expect "^   launch: rank [012] \(pid [0-9]+\) exited with status 1; the other ranks were stopped" "without Join: the launcher stops the job"
expect_none "^   \[rank [12]\] rank [12]: finished" "without Join: no rank finished"
expect "^   \[rank 0\] rank 0: stood in for 2 steps with zeros" "with Join: rank 0 shadowed 2 steps"
expect "^   \[rank 1\] rank 1: stood in for 0 steps with zeros" "with Join: rank 1, the last to finish, shadowed none"
expect "^   \[rank 2\] rank 2: stood in for 1 step with zeros" "with Join: rank 2 shadowed 1 step"
prints=$(fields '^   \[rank [012]\] rank [012]: stood in .*weights ([0-9a-f]+)' | sort -u | wc -l)
holds "n == 1" "with Join: the three replicas end bit-identical" n="$prints"
d=$(field 'max \|difference\| ([0-9.e+-]+)')
holds "d < 1e-6" "with Join: the result is the closed form" d="$d"
