#!/usr/bin/env bash
# What state is the quick check's exercise in? Decided by what the exercise does, not by
# its TODO marker:
#   - exercise.cc exactly as the course ships it (its sha256 is in unsolved.sha256): the
#     test must fail on it, or the test could not catch an unsolved exercise (a course bug);
#   - exercise.cc changed by the learner: its test passing means solved; failing means not
#     yet, and `bazel test :quick_check_exercise --test_output=errors` shows which check.
#   expect_failure.sh path/to/exercise_test path/to/exercise.cc path/to/unsolved.sha256
root="$TEST_SRCDIR/ddp_engine"
test_bin="$root/$1" exercise="$root/$2"
shipped=$(cut -d' ' -f1 "$root/$3")
mine=$(sha256sum "$exercise" | cut -d' ' -f1)
"$test_bin" >"$TEST_TMPDIR/out.txt" 2>&1
passed=$?
if [[ "$mine" == "$shipped" ]]; then
  if [[ $passed -eq 0 ]]; then
    cat "$TEST_TMPDIR/out.txt"
    echo "FAIL: $1 passes on $2 as the course ships it (unsolved): the test cannot catch an unsolved exercise"
    exit 1
  fi
  tail -5 "$TEST_TMPDIR/out.txt"
  echo "PASS: $2 is as the course ships it (unsolved), and its test fails on it, as it should"
  exit 0
fi
if [[ $passed -eq 0 ]]; then
  echo "PASS: $2 is solved: it passes $1"
  grep -q "TODO(exercise)" "$exercise" && echo "      (its TODO(exercise) comment can go now)"
else
  tail -5 "$TEST_TMPDIR/out.txt"
  echo "PASS: $2 has changed but does not pass its test yet; see why with"
  echo "      bazel test //${1%/*}:${1##*/} --test_output=errors"
fi
exit 0
