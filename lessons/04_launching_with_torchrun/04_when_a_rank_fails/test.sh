#!/usr/bin/env bash
# Step 4's claims, for a rank that raises an error, one killed with kill -9 and one that
# returns 0 before it joins, on 3 processes: the launcher names the failed rank and how it
# failed, stops the others, and exits non-zero; no rank gets past the failed step's
# collective; no process is left.
set -euo pipefail
root="$TEST_SRCDIR/ddp_engine"
program="$root/$1"
OUTPUT="$TEST_TMPDIR/output.txt"
source "$root/lessons/common/checks.sh"
for how in error kill leave; do
  echo "==== rank 1 fails by $how"
  args=()
  [[ $how != error ]] && args=(--how "$how")
  start=$(date +%s)
  if "$root/dist/launch" --nproc_per_node=3 "$program" "${args[@]}" >"$OUTPUT" 2>&1; then cat "$OUTPUT"; fail "the launcher should fail"; fi
  took=$(( $(date +%s) - start ))
  cat "$OUTPUT"
  case $how in
    leave)
      expect "^\[rank 1\] rank 1: returning 0 before init_process_group" "rank 1 left before joining"
      expect "^launch: rank 1 \(pid [0-9]+\) exited with status 0 without joining the group \(it never called init_process_group\), while rank [02] waits in init_process_group for all 3 ranks: the group cannot form without it; the other ranks were stopped" "the launcher names rank 1 and a rank that waits for it"
      (( took < 30 )) || fail "the launcher took ${took} s; the ranks' own timeout is 300 s" ;;
    kill)
      expect "^\[rank 1\] rank 1: failing at step 3" "rank 1 failed at step 3"
      expect "^launch: rank 1 \(pid [0-9]+\) was killed by signal 9 \(Killed\); the other ranks were stopped" "the launcher names rank 1 and the signal" ;;
    error)
      expect "^\[rank 1\] rank 1: failing at step 3" "rank 1 failed at step 3"
      expect "^launch: rank 1 \(pid [0-9]+\) exited with status 1; the other ranks were stopped" "the launcher names rank 1 and its status"
      expect "^\[rank 1\] 04_when_a_rank_fails: rank 1: a simulated error at step 3" "rank 1's own error is shown" ;;
  esac
  expect_none "step [3-9] done|step [0-9]{2,} done" "no rank finished step 3 or later without rank 1"
  ! pgrep -f "$program" >/dev/null || fail "a rank is still running"
  echo "ok: no rank left running (the job ended ${took} s after it started)"
done
echo PASS
