#!/usr/bin/env bash
# Steps a learner may start on another number of processes than the lesson uses (NPROC=1,
# NPROC=3): each either runs and prints numbers (never NaN: on one rank nothing is sent,
# and a share of nothing is said in words), or stops at once saying how many processes it
# needs (never a number compared against a run it no longer matches).
#   world_size_test.sh N run-or-refuse|refuse launch program...   (Bazel passes the paths)
# With `refuse`, each program must stop and say why: on N processes its claim cannot hold.
set -uo pipefail
nproc=$1
mode=$2
launch=$3
shift 3
bad=0
for program in "$@"; do
  name=$(basename "$program")
  out=$(ENGINE_DIST_TIMEOUT=60 LESSON_OUT="${TEST_TMPDIR:-/tmp}/out" timeout 300 "$launch" --nproc_per_node="$nproc" \
    "$program" 2>&1)
  status=$?
  if grep -qi "nan" <<<"$out"; then
    echo "FAIL: $name on $nproc processes printed NaN: $(grep -i -m1 nan <<<"$out")"
    bad=1
  elif [[ $status -eq 0 && $mode == refuse ]]; then
    echo "FAIL: $name ran on $nproc processes, where its claim cannot hold, without saying so: $(tail -1 <<<"$out")"
    bad=1
  elif [[ $status -eq 0 ]]; then
    echo "ok: $name runs on $nproc processes"
  elif grep -qE "run it on|needs exactly|NPROC=" <<<"$out"; then
    echo "ok: $name says what it needs: $(grep -m1 -E "run it on|needs exactly|NPROC=" <<<"$out" | cut -c1-120)"
  else
    echo "FAIL: $name exited with $status on $nproc processes without saying why:"
    tail -3 <<<"$out"
    bad=1
  fi
done
exit $bad
