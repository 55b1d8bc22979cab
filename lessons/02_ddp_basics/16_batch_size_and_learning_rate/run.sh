#!/usr/bin/env bash
# Lesson 2, step 16: the recap trained six ways, to see what the batch size does to the
# learning rate. Each run is the recap itself under the launcher; this prints their
# accuracies side by side (and what each run's learning rate did).
#   run.sh path/to/16_batch_size_and_learning_rate_main [--quick]
# --quick: 12,000 training images, 4 epochs, 2,000 test images (the test); else the full
# recap, 10 epochs (about 3 minutes on 2 cores).
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
schedule="$root/$1"
recap="$root/lessons/02_ddp_basics/13_recap_main"
launch="$root/dist/launch"
out="${LESSON_OUT:-${BUILD_WORKSPACE_DIRECTORY:-.}/out/02_batch_size}"
results="${LESSON_RESULTS:-$out/results.jsonl}"
mkdir -p "$out"
epochs=10 limits=()
if [[ "${2:-}" == "--quick" ]]; then epochs=4 limits=(--train-limit 12000 --test-limit 2000); fi
train_size=60000
[[ ${#limits[@]} -gt 0 ]] && train_size=12000

# name  processes  batch-per-process  peak-lr  warm-up-epochs  what it shows
runs=(
  "A 1 64  0.1  0 one process, the recap's settings"
  "B 2 64  0.1  0 two processes, same settings: global batch 128"
  "C 1 128 0.1  0 one process with B's global batch"
  "D 1 64  0.05 0 one process at half B's rate: B's pair by the linear scaling rule"
  "E 2 64  0.2  0 A scaled to two processes by the rule: rate x2, no warm-up"
  "F 2 64  0.2  1 the same with one epoch of linear warm-up"
)
for r in "${runs[@]}"; do
  read -r name nproc batch lr warm what <<<"$r"
  rm -f "$results.$name"
  LESSON_RESULTS="$results.$name" LESSON_OUT="$out/$name" "$launch" --nproc_per_node="$nproc" "$recap" \
    --epochs "$epochs" "${limits[@]}" --batch "$batch" --lr "$lr" --warmup-epochs "$warm" >"$out/$name.log" 2>&1 ||
    { cat "$out/$name.log"; echo "run $name failed"; exit 1; }
  acc=$(grep -E "epoch +$epochs " "$out/$name.log" | sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/')
  first=$(grep -E "epoch +1 " "$out/$name.log" | sed -E 's/.*loss ([0-9.]+) .*/\1/')
  steps=$(python3 -c 'import json, sys
print(*[int(r["value"]) for r in map(json.loads, open(sys.argv[1])) if r["key"] == "steps"])' "$results.$name")
  per_epoch=$(( (train_size + nproc * batch - 1) / (nproc * batch) ))
  printf "%s: %d x %-3d lr %-4s warm-up %d  %5s steps  epoch-1 loss %s  final test accuracy %s%%   (%s)\n" \
    "$name" "$nproc" "$batch" "$lr" "$warm" "$steps" "$first" "$acc" "$what"
  printf "   " && "$schedule" --steps-per-epoch "$per_epoch" --epochs "$epochs" --lr "$lr" --warmup-epochs "$warm"
done
