# Step 6's claims. Without Join, rank 0 runs out of data and calls the barrier that ends
# training while the others call step 4's all-reduce: the mismatch is reported at once,
# naming both calls, and the launcher stops the job. With Join the job ends:
# ranks 0 and 2 stand in for the steps they had no data for (2 and 1), every replica ends
# with the same weights, and they equal the closed form.
expect "^   \[rank 0\] rank 0: my 3 batches are done" "without Join: rank 0 ran out after 3 batches"
expect "^   \[rank [012]\] .*mismatched collectives: rank [012] called .*barrier\(1 x int64\) #16.*" "without Join: rank 0's barrier meets the others' next collective, named at once"
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
# With momentum, the finished ranks' optimizer state stopped at their last step: given the
# model only, the replicas equal at the Join's end part at the first step after it, and
# DDP's replica check stops the run at its next check (training forward 8), naming the cause; given the
# optimizer too, they stay bit-identical. Both runs are the closed form at the Join's end.
on() { LESSON_RESULTS="$LESSON_RESULTS.$1" results "$2"; }
for how in model_only with_optimizer; do
  [[ $(on $how weights | sort -u | wc -l) -eq 1 ]] || fail "$how: the replicas should be equal at the Join's end"
  d=$(LESSON_RESULTS="$LESSON_RESULTS.$how" result closed_form_difference)
  holds "d < 1e-6" "$how, momentum 0.9: the Join's result is the closed form" d="$d"
done
expect_count 3 "^   \[rank [012]\] 06_uneven_inputs: \[DistributedDataParallel\] the replicas differ at training forward 8: parameter \"0.weight\" on rank [12] .*give it to the Join: JoinSync" \
  "the Join given the model only: every rank stops at the next check (forward 8), naming the replicas' difference and JoinSync"
[[ $(on model_only weights_after | wc -l) -eq 0 ]] || fail "given the model only, no rank should finish the steps after the Join"
[[ $(on with_optimizer weights_after | wc -l) -eq 3 && $(on with_optimizer weights_after | sort -u | wc -l) -eq 1 ]] ||
  fail "given the optimizer, the replicas should stay identical: $(on with_optimizer weights_after | xargs)"
echo "ok: the Join given the optimizer too: 5 steps later the replicas are still bit-identical"
