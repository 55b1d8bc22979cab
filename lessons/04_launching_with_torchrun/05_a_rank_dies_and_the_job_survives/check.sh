# Step 5's claims: a rank killed with kill -9 mid-training is restarted with the whole
# group by --max_restarts, the recap resumes from its saved state (mid-epoch or at an
# epoch's end), and the job ends with weights bit-identical to the uninterrupted run's,
# with the same printed losses. A whole machine lost (its launcher killed, its rank with
# it) and started again: its rank joins the job's restart, and the job ends bit-identical
# to the uninterrupted run too.
expect "^   killed rank [01] \(pid [0-9]+\)" "a rank was killed with kill -9"
expect "^launch: rank [01] \(pid [0-9]+\) .*restarting the group \(restart 1 of 1\)" "the launcher restarted the group"
expect "^\[rank 0\] resumed from .*state.safetensors: epoch [1-4], after batch [0-9]+ \(step [0-9]+\), after a restart by the launcher" "the recap resumed from its state"
expect "^bit-identical: [0-9]+ tensors, [0-9]+ values, not one bit differs" "the judge: bit-identical weights"
straight=$(LESSON_RESULTS="$LESSON_RESULTS.straight" result loss_epoch_4)
resumed=$(LESSON_RESULTS="$LESSON_RESULTS.resumed" result loss_epoch_4)
holds "s == r" "the last epoch's loss is the same in both runs, to every digit" s="$straight" r="$resumed"
expect "^4\. a whole machine lost, on (two emulated machines|two launchers on this machine)" "part 4 says where its machines are"
expect "^   killed machine [01]'s launcher \(pid [0-9]+\)" "a machine's launcher was killed with kill -9"
expect "^   launch: .*restarting the group \(restart 1 of 1\)" "the other machine's launcher restarted the job"
expect "^   \[rank [01]\] \[dist\] rank [01]: this machine's launcher is at restart 0, the job at restart 1 .*joining the job's restart 1" \
  "the lost machine's rank, started again, joined the job's restart"
expect "^   \[rank 0\] resumed from .*machines/state.safetensors: epoch [1-4], after batch [0-9]+ \(step [0-9]+\), after a restart by the launcher" \
  "the recap resumed from its state on the two machines"
expect "^   bit-identical: [0-9]+ tensors, [0-9]+ values, not one bit differs" "the judge: the machine lost cost not one bit"
# A job told to stop (SIGTERM to every process, as a scheduler preempting it) stops after a
# step the ranks agree on, saved, and the same command with --resume ends bit-identical.
expect "^   \[rank 0\] asked to stop by SIGTERM: stopped after step [0-9]+ \(epoch [1-4], batch [0-9]+ of [0-9]+\); the training state is saved in .*stopped/state.safetensors" \
  "the recap stopped after a step, its state saved"
expect "^   launch: the launcher got signal Terminated and passed it on to the ranks: every rank stopped on request \(status 143\)" \
  "the launcher was sent SIGTERM, passed it on, and every rank stopped on request (not killed by the second SIGTERM)"
expect "^   exit status 143$" "the job's exit status says it was stopped, not finished"
expect "^   \[rank 0\] resumed from .*stopped/state.safetensors: epoch [1-4], after batch [0-9]+ \(step [0-9]+\)$" \
  "--resume continued from the saved step"
expect "^   stopped and resumed: bit-identical: [0-9]+ tensors, [0-9]+ values, not one bit differs" \
  "the judge: stopping and resuming cost not one bit"
