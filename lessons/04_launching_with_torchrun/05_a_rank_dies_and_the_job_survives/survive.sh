#!/usr/bin/env bash
# Lesson 4, step 5: the recap trained twice on 2 ranks, the second time with one rank
# killed (kill -9) at a random moment; `launch --max_restarts=1` starts the whole group
# again and the recap resumes from its last saved training state. Then the judge
# (same_weights) compares the two final checkpoints.
#   survive.sh path/to/same_weights
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
judge="$root/$1"
recap="$root/lessons/02_ddp_basics/13_recap_main"
launch="$root/dist/launch"
out="${LESSON_OUT:-${BUILD_WORKSPACE_DIRECTORY:-.}/out/04_survive}"
mkdir -p "$out/straight" "$out/resumed"
rm -f "$out"/straight/* "$out"/resumed/*
run=(--epochs 4 --train-limit 12000 --test-limit 1000 --save-every 10)

echo "1. the recap, uninterrupted: launch --nproc_per_node=2 13_recap ${run[*]}"
results="${LESSON_RESULTS:-$out/results.jsonl}"  # what each run reports (lessons::report)
rm -f "$results.straight" "$results.resumed"
LESSON_RESULTS="$results.straight" LESSON_OUT="$out/straight" "$launch" --nproc_per_node=2 "$recap" "${run[@]}" \
  --state "$out/straight/state.safetensors" --checkpoint "$out/straight/final.safetensors" | grep -E "epoch|checkpoint"

victim=$((RANDOM % 2))
delay_ms=$((RANDOM % 200))  # the training after the first save takes 300+ ms
echo "2. the same run under launch --max_restarts=1; rank $victim is killed with kill -9 ${delay_ms} ms after the first saved state"
LESSON_RESULTS="$results.resumed" LESSON_OUT="$out/resumed" "$launch" --nproc_per_node=2 --max_restarts=1 "$recap" "${run[@]}" \
  --state "$out/resumed/state.safetensors" --checkpoint "$out/resumed/final.safetensors" >"$out/resumed/log.txt" 2>&1 &
job=$!
# Up to 60 s for the first saved state (a second or so here; much more under a sanitizer).
for _ in $(seq 1 6000); do [[ -s "$out/resumed/state.safetensors" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
if [[ ! -s "$out/resumed/state.safetensors" ]]; then echo "no training state was saved within 60 s: nothing to resume from"; exit 1; fi
sleep "$(awk -v ms=$delay_ms 'BEGIN { print ms / 1000 }')"
pids=($(pgrep -P $job || true))
if [[ ${#pids[@]} -lt 2 ]]; then echo "the job ended before the kill: nothing to show"; exit 1; fi
# The launcher starts rank 0 first: its children in pid order are ranks 0 and 1.
target=$(printf '%s\n' "${pids[@]}" | sort -n | sed -n "$((victim + 1))p")
kill -9 "$target"
echo "   killed rank $victim (pid $target)"
wait $job
grep -E "epoch|resumed|launch:|checkpoint" "$out/resumed/log.txt" | grep -v "^\[rank 1\]"

echo "3. the judge: the two final checkpoints"
"$judge" "$out/straight/final.safetensors" "$out/resumed/final.safetensors"
