#!/usr/bin/env bash
# Starts the program 3 times as `srun --ntasks=3` would, then 3 times as
# `mpirun -np 3` would: with the variables each sets (and nothing of the launcher's).
# On a real cluster the job script is just:
#   export MASTER_ADDR=$(scontrol show hostnames "$SLURM_JOB_NODELIST" | head -1) MASTER_PORT=29500
#   srun --ntasks-per-node=4 ./train          (or: mpirun -np 8 -x MASTER_ADDR -x MASTER_PORT ./train)
#   as_scheduler.sh path/to/program
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/$1" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/$1" ]] || root="$PWD"
program="$root/$1"
n=3
run_as() {  # run_as NAME VAR_PREFIX...: n processes, each with its own environment
  local name=$1 pids=()
  export MASTER_ADDR=127.0.0.1 MASTER_PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  for ((i = 0; i < n; i++)); do
    if [[ $name == srun ]]; then
      env -u RANK -u WORLD_SIZE SLURM_PROCID=$i SLURM_NTASKS=$n SLURM_LOCALID=$i SLURM_NTASKS_PER_NODE=$n "$program" | sed "s/^/[$name task $i] /" &
    else
      env -u RANK -u WORLD_SIZE OMPI_COMM_WORLD_RANK=$i OMPI_COMM_WORLD_SIZE=$n OMPI_COMM_WORLD_LOCAL_RANK=$i OMPI_COMM_WORLD_LOCAL_SIZE=$n "$program" | sed "s/^/[$name task $i] /" &
    fi
    pids+=($!)
  done
  for p in "${pids[@]}"; do wait "$p"; done
}
run_as srun
run_as mpirun
