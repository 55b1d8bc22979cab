#!/usr/bin/env bash
# A step's run target started by the path a build prints (bazel-bin/<lesson>/<step>), with
# no arguments and from another folder, runs as `bazel run` does: the launcher starts the
# step's processes. Before, the script expected the arguments only `bazel run` gives and
# stopped at "$2: unbound variable". NPROC, which overrides the count, is checked by name.
#   run_directly_test.sh path/to/03_rank_and_world_size path/to/17_mistakes
set -uo pipefail
status=0
step="$PWD/$1"
out=$(cd "$TEST_TMPDIR" && "$step" 2>&1)
rc=$?
for want in "rank 0 of world size 2" "rank 1 of world size 2"; do
  if [[ $rc -ne 0 || "$out" != *"$want"* ]]; then
    echo "FAIL: $1 run directly (exit $rc) did not print \"$want\":"
    echo "$out" | tail -5
    status=1
  fi
done
[[ $status -eq 0 ]] && echo "ok: $1 run directly, from another folder, starts its 2 ranks"
# A step started through its own script (run_script) gets its program's path written in.
script=$(sed -n 2p "$2")
if [[ "$script" == "set -- lessons/"*'_main "$@"'* ]]; then
  echo "ok: $2 passes its program to its script itself: $script"
else
  echo "FAIL: $2's second line is not the program's path given to its script: $script"
  status=1
fi
# NPROC, which overrides a step's process count, is checked in its own name.
for bad in 0 abc -1 2000 " 2"; do
  out=$(cd "$TEST_TMPDIR" && NPROC="$bad" "$step" 2>&1)
  rc=$?
  if [[ $rc -ne 2 || "$out" != *"NPROC=\"$bad\" is not a number of processes"* ]]; then
    echo "FAIL: NPROC=\"$bad\" (exit $rc) was not refused by its name:"
    echo "$out" | tail -3
    status=1
  fi
done
out=$(cd "$TEST_TMPDIR" && NPROC=1 "$step" 2>&1)
if [[ "$out" == *"rank 0 of world size 1"* ]]; then
  echo "ok: NPROC=1 runs one process; 0, abc, -1, 2000 and \" 2\" are refused by name"
else
  echo "FAIL: NPROC=1 did not run one process:"
  echo "$out" | tail -3
  status=1
fi
exit $status
