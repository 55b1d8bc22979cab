#!/usr/bin/env bash
# Lesson 4, step 6: the same three ranks with uneven data, first without Join, then with
# it. (A 3-second timeout bounds the first run, whatever the ranks do.)
#   uneven.sh path/to/06_uneven_inputs
set -uo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
program="$root/$1"
echo "1. without Join (ENGINE_DIST_TIMEOUT=3):"
start=$(date +%s.%N)
ENGINE_DIST_TIMEOUT=3 "$root/dist/launch" --nproc_per_node=3 "$program" --without-join 2>&1 | sed 's/^/   /'
echo "   (the job ended after $(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.2f", e - s }') s)"
echo "2. with Join:"
"$root/dist/launch" --nproc_per_node=3 "$program" 2>&1 | sed 's/^/   /'
# 3. The optimizer's own state: momentum. Each run reports to its own results file.
results="${LESSON_RESULTS:-}"
for how in model_only with_optimizer; do
  if [[ $how == model_only ]]; then
    echo "3. SGD with momentum 0.9, 5 more steps on every rank after the Join; the Join given the model only:"
    extra=()
  else
    echo "4. the same, the Join given the optimizer too (JoinSync):"
    extra=(--join-optimizer)
  fi
  [[ -n "$results" ]] && export LESSON_RESULTS="$results.$how" && rm -f "$LESSON_RESULTS"
  "$root/dist/launch" --nproc_per_node=3 "$program" --momentum 0.9 --after 5 "${extra[@]}" 2>&1 | sed 's/^/   /'
done
