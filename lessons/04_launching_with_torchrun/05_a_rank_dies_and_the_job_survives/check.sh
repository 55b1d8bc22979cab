# Step 5's claims: a rank killed with kill -9 mid-training is restarted with the whole
# group by --max_restarts, the recap resumes from its saved state (mid-epoch or at an
# epoch's end), and the job ends with weights bit-identical to the uninterrupted run's,
# with the same printed losses.
expect "^   killed rank [01] \(pid [0-9]+\)" "a rank was killed with kill -9"
expect "^launch: rank [01] \(pid [0-9]+\) .*restarting the group \(restart 1 of 1\)" "the launcher restarted the group"
expect "^\[rank 0\] resumed from .*state.safetensors: epoch [1-4], after batch [0-9]+ \(step [0-9]+\), after a restart by the launcher" "the recap resumed from its state"
expect "^bit-identical: [0-9]+ tensors, [0-9]+ values, not one bit differs" "the judge: bit-identical weights"
straight=$(LESSON_RESULTS="$LESSON_RESULTS.straight" result loss_epoch_4)
resumed=$(LESSON_RESULTS="$LESSON_RESULTS.resumed" result loss_epoch_4)
holds "s == r" "the last epoch's loss is the same in both runs, to every digit" s="$straight" r="$resumed"
