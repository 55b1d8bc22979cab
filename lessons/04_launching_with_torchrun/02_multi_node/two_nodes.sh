#!/usr/bin/env bash
# Two nodes of 2 processes each: one launcher per node, as you would start one on each of
# two machines (with the first machine's address as --master_addr). Where this machine can
# make them (root, network namespaces), the nodes are emulated machines (tools/nodes.sh):
# each has its own address on a private network, its own hostname and its own /dev/shm, so
# the ranks of one node share memory and the nodes talk over TCP. Otherwise both
# launchers run here, and it says so.
#   two_nodes.sh path/to/program
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
program="$root/$1"
nodes="$root/tools/nodes.sh"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
if why=$(bash "$nodes" check 2>&1); then
  eval "$(bash "$nodes" up 2)"
  trap 'bash "$nodes" down "$NODES_ID"' EXIT
  trap 'exit 1' TERM INT  # a timeout or ^C still removes the machines
  echo "two emulated machines (tools/nodes.sh): node 0 at $NODE0_ADDR, node 1 at $NODE1_ADDR"
  master=$NODE0_ADDR port=29500
  export ENGINE_SOCKET_IFNAME=eth0  # the interface the machines share (as GLOO_SOCKET_IFNAME)
  on_node() { local k=$1; shift; bash "$nodes" run "$NODES_ID" "$k" "$@"; }
else
  echo "cannot emulate machines here ($why): the two nodes are two launchers on this machine"
  master=127.0.0.1
  port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
  on_node() { shift; "$@"; }
fi
common=(--nnodes=2 --nproc_per_node=2 --master_addr=$master --master_port=$port --job_token=$token)
echo "node 0: launch ${common[*]/$token/TOKEN} --node_rank=0 program"
echo "node 1: launch ${common[*]/$token/TOKEN} --node_rank=1 program"
on_node 1 "$root/dist/launch" "${common[@]}" --node_rank=1 "$program" | sed 's/^/[node 1] /' &
node1=$!
on_node 0 "$root/dist/launch" "${common[@]}" --node_rank=0 "$program" | sed 's/^/[node 0] /'
wait $node1
# Without a launcher (as srun or mpirun start ranks) there is no GROUP_RANK: the node
# number comes from the layout, rank / ranks per node. One process, here, to show it.
alone_port=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
echo "the same program without a launcher (no GROUP_RANK), one process:"
LESSON_RESULTS= RANK=0 WORLD_SIZE=1 LOCAL_RANK=0 LOCAL_WORLD_SIZE=1 MASTER_ADDR=127.0.0.1 MASTER_PORT=$alone_port \
  "$program" | sed 's/^/[alone] /'

# Part 2, on emulated machines only: the network between them fails. Both nodes all-reduce
# every 0.3 s; after round 2, node 1's link goes down, for 2 s and then for good.
[[ -n "${NODES_ID:-}" ]] || exit 0
echo
echo "part 2: the network between the machines fails (ENGINE_DIST_TIMEOUT=5: a collective waits"
echo "at most 5 s; 300 s by default, and PyTorch's default timeout is 30 minutes)"
# lose_network NAME PORT SECONDS DIST LINK: node 1's link down for SECONDS after round 2 (0:
# for good), with ENGINE_DIST_TIMEOUT=DIST and ENGINE_LINK_TIMEOUT=LINK.
lose_network() {
  local name=$1 job_port=$2 down_for=$3 dist_timeout=$4 link_timeout=$5 out cut_at
  out=$(mktemp -d)
  bash "$nodes" link "$NODES_ID" 1 up  # after a cut for good
  local job=(--nnodes=2 --nproc_per_node=2 --master_addr=$master --master_port=$job_port --job_token=$token)
  for k in 1 0; do
    LESSON_RESULTS= ENGINE_DIST_TIMEOUT=$dist_timeout ENGINE_LINK_TIMEOUT=$link_timeout on_node $k "$root/dist/launch" \
      "${job[@]}" --node_rank=$k "$program" --rounds 8 >"$out/$k" 2>&1 &
    pids[$k]=$!
  done
  for _ in $(seq 1 2000); do grep -q "round 2:" "$out/0" && break; sleep 0.01; done
  bash "$nodes" link "$NODES_ID" 1 down
  cut_at=$(date +%s.%N)
  if [[ "$down_for" != 0 ]]; then
    sleep "$down_for"
    bash "$nodes" link "$NODES_ID" 1 up
    echo "$name: after round 2, node 1's network went down for $down_for s, then came back"
  else
    echo "$name: after round 2, node 1's network went down for good"
  fi
  wait "${pids[0]}" || true
  wait "${pids[1]}" || true
  [[ "$down_for" != 0 ]] || awk -v s="$cut_at" -v e="$(date +%s.%N)" -v n="$name" \
    'BEGIN { printf "%s: both nodes had stopped %.1f s after the network went down\n", n, e - s }'
  sed "s/^/[$name: node 0] /" "$out/0" | grep -v "local rank\|runs on host"
  sed "s/^/[$name: node 1] /" "$out/1" | grep -v "local rank\|runs on host"
  rm -rf "$out"
}
lose_network blip $((port + 1)) 2 5 30
echo "TCP resent what the link dropped: the round the blip held up took longer, and the job went on."
lose_network cut $((port + 2)) 0 5 30
echo "A link that goes down sends no reset: each rank waiting across it learns only from a"
echo "clock, here the collective timeout, and names the rank it waited for, that rank's machine"
echo "and the network."
echo
echo "The same cut with ENGINE_DIST_TIMEOUT=60 and ENGINE_LINK_TIMEOUT=3: a collective may wait 60 s"
echo "for a rank that is slow, but a machine whose TCP answers nothing for 3 s is taken for lost."
lose_network lost $((port + 3)) 0 60 3
echo "A live machine's TCP acknowledges data and answers probes even while its process computes"
echo "or is stuck: only a machine, or a network, that is gone stays silent. So the link timeout"
echo "can be short while the collective timeout stays long."
