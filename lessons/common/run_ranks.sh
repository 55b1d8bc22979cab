#!/usr/bin/env bash
# Runs a lesson program on N processes through the launcher, as
# `torchrun --nproc_per_node=N program.py` would. NPROC in the environment overrides N.
#   run_ranks.sh N path/to/program [ARGS...]
# Each step's run target is a copy with its N and program written in (step.bzl), so that
# bazel-bin/<lesson>/<step> alone runs the step.
set -euo pipefail
nproc="${NPROC:-$1}"
# NPROC is the learner's to set: a bad one is said in its own name, not as the launcher's
# --nproc_per_node, which they never typed (1..1024 is the launcher's own range).
if [[ -n "${NPROC:-}" ]] && ! [[ "$NPROC" =~ ^(cpu|gpu|auto)$ ||
                                ( "$NPROC" =~ ^[1-9][0-9]{0,3}$ && "$NPROC" -le 1024 ) ]]; then
  echo "NPROC=\"$NPROC\" is not a number of processes: give 1 to 1024 (or cpu, gpu or auto," \
       "as the launcher's --nproc_per_node), or unset it for this step's own ($1)" >&2
  exit 2
fi
program="$2"
shift 2
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
exec "$root/dist/launch" --nproc_per_node="$nproc" "$root/$program" "$@"
