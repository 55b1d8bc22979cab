#!/usr/bin/env bash
# A lesson step's test: runs the step's program on N processes through the launcher (or
# through the step's own run script, for steps the launcher alone does not start), shows
# what it printed, then runs the step's check.sh, whose assertions read that output.
#   step_test.sh N|path/to/run_script.sh path/to/program path/to/check.sh [ARGS...]
set -euo pipefail
launch="$1" program="$2" check="$3"
shift 3
root="$TEST_SRCDIR/ddp_engine"
export LESSON_OUT="$TEST_TMPDIR/out"  # where a step writes its files (traces, pictures)
mkdir -p "$LESSON_OUT"
export LESSON_RESULTS="$TEST_TMPDIR/results.jsonl"  # what the step reports (lessons::report), for check.sh
rm -f "$LESSON_RESULTS"
OUTPUT="$TEST_TMPDIR/output.txt"
if [[ "$launch" =~ ^[0-9]+$ ]]; then
  run=("$root/dist/launch" --nproc_per_node="$launch" "$root/$program")
else
  run=(bash "$root/$launch" "$program")
fi
if ! "${run[@]}" "$@" >"$OUTPUT" 2>&1; then
  cat "$OUTPUT"
  echo "FAIL: the program exited with an error"
  exit 1
fi
cat "$OUTPUT"
echo "---- checks ($check)"
source "$root/lessons/common/checks.sh"
source "$root/$check"
echo "PASS"
