#!/usr/bin/env bash
# Lesson 2's program on NPROC processes (default 2) through the launcher: what
# `torchrun --nproc_per_node=2 train.py` is to PyTorch.
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
exec "$root/dist/launch" --nproc_per_node="${NPROC:-2}" "$root/lessons/02_ddp_basics/train_ddp" "$@"
