#!/usr/bin/env bash
# Steps a learner may start on one process (NPROC=1): each either runs and prints numbers
# (never NaN: on one rank nothing is sent, and a share of nothing is said in words), or
# stops at once saying how many processes it needs.
#   one_rank_test.sh launch program...   (Bazel passes the runfiles paths)
set -uo pipefail
launch=$1
shift
bad=0
for program in "$@"; do
  name=$(basename "$program")
  out=$(ENGINE_DIST_TIMEOUT=60 LESSON_OUT="${TEST_TMPDIR:-/tmp}/out" timeout 300 "$launch" --nproc_per_node=1 \
    "$program" 2>&1)
  status=$?
  if grep -qi "nan" <<<"$out"; then
    echo "FAIL: $name on 1 process printed NaN: $(grep -i -m1 nan <<<"$out")"
    bad=1
  elif [[ $status -eq 0 ]]; then
    echo "ok: $name runs on 1 process"
  elif grep -qE "run it on|needs exactly|NPROC=" <<<"$out"; then
    echo "ok: $name says what it needs: $(grep -m1 -E "run it on|needs exactly|NPROC=" <<<"$out" | cut -c1-120)"
  else
    echo "FAIL: $name exited with $status on 1 process without saying why:"
    tail -3 <<<"$out"
    bad=1
  fi
done
exit $bad
