#!/usr/bin/env bash
# Lesson 1's model-parallel MLP on 2 processes through the launcher.
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
exec "$root/dist/launch" --nproc_per_node=2 "$root/lessons/01_data_vs_model_parallelism/split_mlp_main" "$@"
