#!/usr/bin/env bash
# The trainer's command line: junk and unknown flags stop it before any training, with the
# flag named and exit code 2, and without a checkpoint; --flag=value works like --flag value.
set -euo pipefail
train="$1"
dir="${TEST_TMPDIR:-$(mktemp -d)}"
ckpt="$dir/flags.safetensors"

expect_refused() {  # expect_refused WHAT-THE-ERROR-NAMES ARGS...
  local want="$1"; shift
  set +e
  "$train" "$@" --checkpoint "$ckpt" >"$dir/out" 2>"$dir/err"
  local rc=$?
  set -e
  [[ $rc -eq 2 ]] || { echo "FAIL: train $* exited $rc, expected 2"; cat "$dir/err"; exit 1; }
  grep -qF -- "$want" "$dir/err" || { echo "FAIL: train $*: the error does not name '$want':"; cat "$dir/err"; exit 1; }
  [[ ! -e "$ckpt" ]] || { echo "FAIL: train $* wrote a checkpoint"; exit 1; }
  echo "ok: train $* -> $(head -1 "$dir/err")"
}

expect_refused "--epochs: expected an integer" --epochs abc
expect_refused "--epochs: expected an integer" --epochs 2x
expect_refused "--epochs: expected an integer" --epochs 0
expect_refused "--lr: expected a number" --lr nan
expect_refused "--batch: expected an integer" --batch=-3
expect_refused "unknown flag --epoch" --epoch 2
expect_refused "--model: expected one of mlp|cnn" --model rnn
expect_refused "--epochs: missing value" --epochs
expect_refused "--no-checkpoint and --checkpoint cannot be given together" --no-checkpoint

"$train" --help | grep -q -- "--epochs VALUE" || { echo "FAIL: --help does not list --epochs"; exit 1; }
echo "ok: --help lists the flags"

"$train" --epochs=1 --train-limit=300 --checkpoint="$ckpt" >"$dir/out"
grep -q "1 epochs" "$dir/out" && [[ -s "$ckpt" ]] || { echo "FAIL: --epochs=1 did not train one epoch"; cat "$dir/out"; exit 1; }
echo "ok: --epochs=1 --train-limit=300 trained one epoch and saved $(basename "$ckpt")"

# --autocast says what it buys on this CPU: a kernel of its own, or the float32 GEMM.
"$train" --epochs 1 --train-limit 300 --autocast bf16 --no-checkpoint >"$dir/out"
grep -qE "^autocast bf16: (products in bfloat16 on the (amx|avx512-bf16)|this CPU multiplies bfloat16 no faster than float32)" "$dir/out" ||
  { echo "FAIL: --autocast bf16 did not say where its products run"; cat "$dir/out"; exit 1; }
echo "ok: $(grep '^autocast' "$dir/out")"
"$train" --epochs 1 --train-limit 300 --autocast fp16 --no-checkpoint >"$dir/out"
grep -qF "autocast fp16: there is no float16 kernel for the CPU" "$dir/out" ||
  { echo "FAIL: --autocast fp16 did not say where its products run"; cat "$dir/out"; exit 1; }
echo "ok: $(grep '^autocast' "$dir/out")"

# A checkpoint folder that does not exist is named before any training (not after an epoch).
set +e
"$train" --epochs 1 --train-limit 300 --checkpoint "$dir/no_such_folder/x.safetensors" >"$dir/out" 2>"$dir/err"
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -qF "cannot save to $dir/no_such_folder/x.safetensors: the folder $dir/no_such_folder does not exist" "$dir/err" && ! grep -q "^epoch" "$dir/out" ||
  { echo "FAIL: a missing checkpoint folder was not refused before training (exit $rc)"; cat "$dir/out" "$dir/err"; exit 1; }
echo "ok: a missing checkpoint folder -> $(head -1 "$dir/err")"

# --resume without a checkpoint says that it starts afresh.
"$train" --epochs 1 --train-limit 300 --resume --checkpoint "$dir/fresh.safetensors" >"$dir/out"
grep -qF -- "--resume: no checkpoint at $dir/fresh.safetensors yet, so training starts at epoch 1" "$dir/out" ||
  { echo "FAIL: --resume without a checkpoint did not say so"; cat "$dir/out"; exit 1; }
echo "ok: --resume without a checkpoint says it starts at epoch 1"

# Told to stop (SIGTERM) in the middle of an epoch: it saves after the step it is in, says
# where, and exits 143; --resume continues from there and ends byte-identical (the same
# checkpoint file) to a run never stopped.
run=(--epochs 3)
"$train" "${run[@]}" --checkpoint "$dir/straight.safetensors" >"$dir/out"
"$train" "${run[@]}" --checkpoint "$dir/stopped.safetensors" >"$dir/stopped.txt" &
job=$!
for _ in $(seq 1 6000); do [[ -s "$dir/stopped.safetensors" ]] || ! kill -0 $job 2>/dev/null && break; sleep 0.01; done
sleep 0.1
kill -TERM $job 2>/dev/null || true
rc=0 && wait $job || rc=$?
[[ $rc -eq 143 ]] && grep -qE "^asked to stop by SIGTERM: stopped after batch [0-9]+ of 938 in epoch [23]; $dir/stopped.safetensors holds this step, and the same command with --resume continues from it$" "$dir/stopped.txt" ||
  { echo "FAIL: told to stop, the trainer should save where it is and exit 143 (exit $rc)"; cat "$dir/stopped.txt"; exit 1; }
"$train" "${run[@]}" --checkpoint "$dir/stopped.safetensors" --resume >"$dir/out"
cmp -s "$dir/straight.safetensors" "$dir/stopped.safetensors" ||
  { echo "FAIL: stopped and resumed, the checkpoint should be byte-identical to a run never stopped"; exit 1; }
echo "ok: $(grep asked "$dir/stopped.txt" | cut -d';' -f1), exit 143; resumed, byte-identical to a run never stopped"

# Another run saving to the same checkpoint (a run started twice in one folder; here this
# script holds the lock, with util-linux's flock, which writes nothing into it) is refused
# before any training, naming the lock, and the checkpoint it would overwrite is unchanged.
cp "$dir/straight.safetensors" "$dir/held.safetensors"
exec {lock}>"$dir/held.safetensors.lock"
flock -n "$lock"
set +e
"$train" --epochs 1 --train-limit 300 --checkpoint "$dir/held.safetensors" >"$dir/out" 2>"$dir/err"
rc=$?
set -e
exec {lock}>&-
[[ $rc -eq 1 ]] && grep -qF "another run is saving to $dir/held.safetensors (the checkpoint, --checkpoint): its lock, $dir/held.safetensors.lock, is held by a process that has not yet said which" "$dir/err" &&
  ! grep -q "^epoch" "$dir/out" && cmp -s "$dir/straight.safetensors" "$dir/held.safetensors" ||
  { echo "FAIL: a checkpoint another run holds was not refused before training (exit $rc)"; cat "$dir/out" "$dir/err"; exit 1; }
echo "ok: a checkpoint another run is saving to -> $(head -c 120 "$dir/err")..."

# --resume from a named pipe (FIFO) where the checkpoint should be: the trainer waited at its
# open for good, and SIGTERM could not end the wait. It stops at once, naming it.
mkfifo "$dir/pipe.safetensors"
set +e
timeout -s KILL 20 "$train" --resume --epochs 1 --train-limit 300 --checkpoint "$dir/pipe.safetensors" >"$dir/out" 2>"$dir/err"
rc=$?
set -e
[[ $rc -eq 1 ]] && grep -qF "$dir/pipe.safetensors: it is a named pipe (FIFO), not a file" "$dir/err" &&
  ! grep -q "^epoch" "$dir/out" || { echo "FAIL: --resume from a named pipe should stop at once, naming it (exit $rc)"; cat "$dir/out" "$dir/err"; exit 1; }
echo "ok: --resume from a named pipe -> $(cat "$dir/err")"
