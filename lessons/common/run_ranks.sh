#!/usr/bin/env bash
# Runs a lesson program on N processes through the launcher, as
# `torchrun --nproc_per_node=N program.py` would. NPROC in the environment overrides N.
#   run_ranks.sh N path/to/program [ARGS...]
# Each step's run target is a copy with its N and program written in (step.bzl), so that
# bazel-bin/<lesson>/<step> alone runs the step.
set -euo pipefail
nproc="${NPROC:-$1}"
program="$2"
shift 2
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
exec "$root/dist/launch" --nproc_per_node="$nproc" "$root/$program" "$@"
