# Step 17's claims: each mistake looks as the README says.
on() { LESSON_RESULTS="$LESSON_RESULTS.$1" results "$2"; }
# 1. Without set_epoch, each rank sees the same order in all three epochs.
for r in 0 1; do
  [[ $(grep -cE "^ *\[rank $r\] rank $r epoch [0-2]: " "$OUTPUT") -eq 3 ]] || fail "rank $r should print 3 epochs"
  [[ $(grep -E "^ *\[rank $r\] rank $r epoch [0-2]: " "$OUTPUT" | sed 's/.*: //' | sort -u | wc -l) -eq 1 ]] ||
    fail "rank $r: the epochs' orders differ, but set_epoch was never called"
done
echo "ok: without set_epoch every epoch repeats the same order on each rank"
expect_count 1 "\[rank 0\] \[DistributedSampler\] epoch 0's order was drawn again" "rank 0 says once that set_epoch was forgotten"
# 2. Every rank wrote the whole file (world x the bytes); it still loads.
[[ $(on every_rank_saves bytes_written | wc -l) -eq 2 ]] || fail "both ranks should have written the checkpoint"
expect_count 2 "the file is whole \([0-9]+ tensors load\)" "the file loads after both ranks wrote it"
# 3. The unused parameters are named, and find_unused_parameters fixes it.
for e in "$(on unused_parameter unused_error | head -1)" "$(on unused_parameter unused_error | tail -1)"; do
  [[ "$e" == *"head_not_used.weight"* && "$e" == *"head_not_used.bias"* && "$e" == *find_unused_parameters* ]] ||
    fail "the unused parameters should be named, with the fix: $e"
done
echo "ok: every rank names head_not_used.weight and .bias and says find_unused_parameters"
[[ $(on unused_parameter unused_fixed | wc -l) -eq 2 ]] || fail "find_unused_parameters should let backward complete"
echo "ok: with find_unused_parameters=true backward completes"
# 4. A collective on rank 0 only: the mismatch is named at once, with both calls.
# Whichever rank sees it first names both calls (the other reads the same words from it).
mismatch=$(grep -E "mismatched collectives: rank [01] called all_reduce" "$OUTPUT" | head -1)
[[ "$mismatch" == *"rank 1 called all_reduce(SUM, 2 x int64)"* && "$mismatch" == *"rank 0 called all_reduce(AVG, 1 x float32)"* ]] ||
  fail "the one-rank collective should be reported as a mismatch naming both calls: ${mismatch:-no such line}"
echo "ok: the one-rank collective is reported as a mismatch naming both calls"
t=$(sed -n '/^4\. collective_on_one_rank/,/^5\./p' "$OUTPUT" | grep -oE 'job exit status [0-9]+, after [0-9.]+ s' | grep -oE '[0-9.]+ s' | grep -oE '[0-9.]+')
holds "t < 2" "... within 2 s (no timeout needed)" t="$t"
# 5. A rank that hangs: the others time out after ENGINE_DIST_TIMEOUT=3 and name it.
expect "timed out after 3 s in all_reduce\(SUM, 4 x float32\) #0 on rank 0, waiting for rank 1" \
  "the hanging rank is named by the rank waiting for it"
t=$(sed -n '/^5\. a_rank_hangs/,/^6\./p' "$OUTPUT" | grep -oE 'job exit status [0-9]+, after [0-9.]+ s' | grep -oE '[0-9.]+ s' | grep -oE '[0-9.]+')
holds "t >= 2.9 && t < 10" "... after the 3 s timeout, not the sleeping rank's 30 s" t="$t"
# 6. The wrapper's state_dict() loaded into the bare model: the "module." prefix is named.
for e in "$(on saved_the_wrapper prefix_error | head -1)" "$(on saved_the_wrapper prefix_error | tail -1)"; do
  [[ "$e" == *'every key of the state starts with "module."'* && "$e" == *"ddp.module()"* ]] ||
    fail "loading the wrapper's state into the bare model should name the prefix and the fix: $e"
done
echo "ok: every rank names the \"module.\" prefix and ddp.module()"
[[ $(on saved_the_wrapper prefix_fixed | wc -l) -eq 2 ]] || fail "the state of ddp.module() should load into the bare model"
echo "ok: saved from ddp.module(), the checkpoint loads into the bare model"
# 7. A checkpoint loaded on rank 0 only: both ranks stop at the first forward, naming the
# parameter, the rank and the cause.
for e in "$(on loaded_on_one_rank error | head -1)" "$(on loaded_on_one_rank error | tail -1)"; do
  [[ "$e" == *'the replicas differ at training forward 1: parameter "0.weight" on rank 1'* &&
     "$e" == *"a checkpoint loaded on some ranks only after wrapping (load it on every rank"* ]] ||
    fail "a checkpoint loaded on one rank should be named at the first forward: $e"
done
[[ $(on loaded_on_one_rank error | wc -l) -eq 2 ]] || fail "both ranks should stop at the first forward"
echo "ok: a checkpoint loaded on one rank is named on both at the first forward, with the fix"
