#!/usr/bin/env bash
# The course's shape, checked: every lesson's README says how long it takes and what the
# learner can do after it; every step folder (NN_name, or quick_check) has a README and is
# linked from its lesson's README; every step is on the course's path in lessons/README.md.
set -uo pipefail
root="$TEST_SRCDIR/ddp_engine/lessons"
bad=0
problem() { echo "FAIL: $*"; bad=1; }
for readme in "$root"/*/README.md; do
  lesson=$(basename "$(dirname "$readme")")
  [[ "$lesson" == common ]] && continue
  line=$(grep -nE '^\*\*About [0-9]+ minutes\.\*\* After it you can:$' "$readme" | head -1 | cut -d: -f1)
  if [[ -z "$line" ]]; then
    problem "$lesson/README.md does not open with '**About N minutes.** After it you can:'"
  elif ! sed -n "$((line + 2))p" "$readme" | grep -q '^- '; then
    problem "$lesson/README.md: no list of what the learner can do after its time line"
  else
    echo "ok: $lesson says its time and $(sed -n "$((line + 2)),\$p" "$readme" | sed '/^$/q' | grep -c '^- ') outcomes"
  fi
  for step in "$root/$lesson"/[0-9][0-9]_*/ "$root/$lesson"/quick_check/; do
    [[ -d "$step" ]] || continue
    name=$(basename "$step")
    [[ -s "$step/README.md" ]] || problem "$lesson/$name has no README.md"
    grep -q "($name/)" "$readme" || problem "$lesson/README.md does not link its step $name"
    if [[ "$name" != quick_check ]]; then
      grep -q "$lesson:$name" "$root/README.md" || grep -q "$lesson:.*\.\.\..*:$name" "$root/README.md" ||
        problem "lessons/README.md's path does not list $lesson:$name"
    fi
  done
done
exit $bad
