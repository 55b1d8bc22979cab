#!/usr/bin/env bash
# While an exercise still has its TODO, its test must fail: this proves the test catches
# an unsolved exercise. Once the learner removes the TODO marker, there is nothing to prove.
#   expect_failure.sh path/to/exercise_test path/to/exercise.cc
root="$TEST_SRCDIR/ddp_engine"
if ! grep -q "TODO(exercise)" "$root/$2"; then
  echo "PASS: $2 has no TODO(exercise) left: solved, so its test is expected to pass"
  exit 0
fi
if "$root/$1" >"$TEST_TMPDIR/out.txt" 2>&1; then
  cat "$TEST_TMPDIR/out.txt"
  echo "FAIL: $1 passed, but $2 still has its TODO: the test cannot catch an unsolved exercise"
  exit 1
fi
tail -5 "$TEST_TMPDIR/out.txt"
echo "PASS: $1 fails while the TODO in $2 is left undone, as it should"
