#!/usr/bin/env bash
# Two "nodes" of 2 processes each, on this machine: two launchers, as you would start one
# on each of two machines (with the first machine's address as --master_addr).
#   two_nodes.sh path/to/program
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
program="$root/$1"
port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
common=(--nnodes=2 --nproc_per_node=2 --master_addr=127.0.0.1 --master_port=$port --job_token=$token)
echo "node 0: launch ${common[*]/$token/TOKEN} --node_rank=0 program"
echo "node 1: launch ${common[*]/$token/TOKEN} --node_rank=1 program"
"$root/dist/launch" "${common[@]}" --node_rank=1 "$program" | sed 's/^/[node 1] /' &
node1=$!
"$root/dist/launch" "${common[@]}" --node_rank=0 "$program" | sed 's/^/[node 0] /'
wait $node1
