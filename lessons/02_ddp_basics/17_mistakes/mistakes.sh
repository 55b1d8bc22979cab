#!/usr/bin/env bash
# Lesson 2, step 17: seven mistakes, each its own 2-process job, each shown as it looks.
# ENGINE_DIST_TIMEOUT=3 bounds every collective (the default is 300 s).
#   mistakes.sh path/to/17_mistakes
set -uo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
program="$root/$1"
results="${LESSON_RESULTS:-}"
n=0
for mistake in forgot_set_epoch every_rank_saves unused_parameter collective_on_one_rank a_rank_hangs saved_the_wrapper loaded_on_one_rank; do
  n=$((n + 1))
  echo "$n. $mistake"
  start=$(date +%s.%N)
  [[ -n "$results" ]] && export LESSON_RESULTS="$results.$mistake" && rm -f "$LESSON_RESULTS"
  ENGINE_DIST_TIMEOUT=3 "$root/dist/launch" --nproc_per_node=2 "$program" --mistake "$mistake" 2>&1 | sed 's/^/   /'
  status=${PIPESTATUS[0]}
  echo "   (job exit status $status, after $(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }') s)"
done
exit 0
