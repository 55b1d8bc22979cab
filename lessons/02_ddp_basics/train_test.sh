#!/usr/bin/env bash
# Lesson 2 end to end, small: 2 processes train on 4000 images for 2 epochs. Checks that
# only rank 0 prints the epoch lines and saves the checkpoint, that the model learns, and
# that the job ends cleanly.
set -euo pipefail
root="$TEST_SRCDIR/ddp_engine"
ckpt="$TEST_TMPDIR/ddp.safetensors"
out="$TEST_TMPDIR/out.txt"
"$root/lessons/02_ddp_basics/train" --epochs 2 --train-limit 4000 --test-limit 2000 --checkpoint "$ckpt" >"$out" 2>&1 || {
  cat "$out"; echo "FAIL: the job failed"; exit 1; }
cat "$out"
fail() { echo "FAIL: $*"; exit 1; }
grep -q "^\[rank 0\] Fashion-MNIST, mlp, DDP over 2 processes (gloo)" "$out" || fail "no header from rank 0"
[[ $(grep -c "^\[rank 0\] epoch" "$out") -eq 2 ]] || fail "rank 0 should print 2 epoch lines"
! grep -q "^\[rank 1\] epoch" "$out" || fail "rank 1 printed an epoch line"
acc=$(grep "^\[rank 0\] epoch  2" "$out" | sed -E 's/.*test accuracy ([0-9.]+)%.*/\1/')
awk -v a="$acc" 'BEGIN { exit !(a > 70) }' || fail "accuracy $acc% after 2 epochs on 4000 images (expected > 70%)"
grep -q "^\[rank 0\] checkpoint saved by rank 0: $ckpt" "$out" || fail "no checkpoint message"
[[ -s "$ckpt" ]] || fail "checkpoint $ckpt missing"
echo "1 passed, 0 failed"
