#!/usr/bin/env bash
# Step 3's claims: started as srun or as mpirun would start them, with no launcher, the
# processes find their ranks in the scheduler's variables and form one group.
set -euo pipefail
root="$TEST_SRCDIR/ddp_engine"
OUTPUT="$TEST_TMPDIR/output.txt"
source "$root/lessons/common/checks.sh"
bash "$root/lessons/04_launching_with_torchrun/03_srun_and_mpirun/as_scheduler.sh" "$1" >"$OUTPUT" 2>&1 || { cat "$OUTPUT"; fail "the job failed"; }
cat "$OUTPUT"
for i in 0 1 2; do
  expect "^\[srun task $i\] started by slurm: rank $i of 3, local rank $i; all_reduce of ones = 3$" "srun task $i"
  expect "^\[mpirun task $i\] started by openmpi: rank $i of 3, local rank $i; all_reduce of ones = 3$" "mpirun task $i"
done
echo PASS
