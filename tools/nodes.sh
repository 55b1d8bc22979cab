#!/usr/bin/env bash
# Emulated machines ("nodes") on this one, for multi-node tests and benchmarks. Node k is a
# network namespace with its own address (10.77.<id>.<k+1>/24, on a veth pair to a bridge
# shared by the nodes), and every command run on it also gets its own hostname (a UTS
# namespace: the engine sees another machine) and its own /dev/shm (a mount namespace: no
# shared memory across nodes). Links can be capped with tc's token bucket (tbf).
#
#   eval "$(bash tools/nodes.sh up 2 [RATE])"   # e.g. RATE=1gbit; sets NODES_ID and NODE0_ADDR, NODE1_ADDR, ...
#   bash tools/nodes.sh run "$NODES_ID" 1 CMD... # CMD on node 1 (its network, hostname, /dev/shm)
#   bash tools/nodes.sh link "$NODES_ID" 1 down  # cuts node 1 off the network (up: back again)
#   bash tools/nodes.sh mtu "$NODES_ID" 1 9000   # node 1's interface MTU (the switch keeps 1500)
#   bash tools/nodes.sh down "$NODES_ID"         # kills what runs there, removes namespaces, links, bridge
#   bash tools/nodes.sh check                    # exit 0 if nodes can be made here, else prints why
#
# Needs root and iproute2 (ip, tc) and util-linux (unshare); tools/setup.sh installs them.
# Each `up` takes a free id (1..200) under a lock, so tests running side by side do not
# collide; pair it with `trap 'bash tools/nodes.sh down $NODES_ID' EXIT`.
set -euo pipefail

die() { echo "nodes: $*" >&2; exit 1; }
ns() { echo "en$1n$2"; }   # namespace of node $2 in set $1
br() { echo "en$1br"; }

why_not() {
  [[ $(id -u) -eq 0 ]] || { echo "not root (network namespaces need CAP_NET_ADMIN)"; return; }
  for c in ip tc unshare flock; do command -v "$c" >/dev/null || { echo "$c is missing (bash tools/setup.sh)"; return; }; done
  local probe="enprobe$$"
  ip netns add "$probe" 2>/dev/null || { echo "cannot create a network namespace here (a container without CAP_SYS_ADMIN?)"; return; }
  ip netns del "$probe"
  ip link add "${probe}b" type bridge 2>/dev/null || { echo "cannot create a bridge here"; return; }
  ip link del "${probe}b"
  unshare --uts --mount true 2>/dev/null || { echo "cannot create UTS and mount namespaces here"; return; }
}

cmd_check() {
  local why
  why=$(why_not)
  [[ -z "$why" ]] || { echo "$why"; exit 1; }
}

cmd_up() {
  local n="$1" rate="${2:-}"
  [[ "$n" =~ ^[0-9]+$ && "$n" -ge 1 && "$n" -le 16 ]] || die "up: the number of nodes must be 1..16, got '$n'"
  [[ -z "$rate" || "$rate" =~ ^[0-9]+(kbit|mbit|gbit)$ ]] || die "up: RATE must look like 100mbit or 1gbit, got '$rate'"
  local why
  why=$(why_not)
  [[ -z "$why" ]] || die "cannot make nodes: $why"
  local id=""
  exec 9>/tmp/engine-nodes.lock
  flock -w 30 9 || die "up: the lock /tmp/engine-nodes.lock is held too long"
  for i in $(seq 1 200); do
    if ! ip link show "$(br "$i")" >/dev/null 2>&1 && ! ip -br link | grep -q "^en${i}h[0-9]"; then id=$i; break; fi
  done
  [[ -n "$id" ]] || die "up: all 200 node sets are in use (bash tools/nodes.sh down ID)"
  ip link add "$(br "$id")" type bridge
  ip link set "$(br "$id")" up
  flock -u 9
  echo "NODES_ID=$id"
  # The token bucket's depth: 4 ms of the rate (at least 16 KB), the least a 250 Hz kernel
  # needs to keep the rate, so that bursts above the rate stay short. A link idle for t
  # banks min(burst, t x rate) bytes that then leave at once: a wire cannot do that, so
  # bench/ddp_nodes.py reports the depth. NODES_BURST=<bytes> sets it instead.
  local burst=""
  if [[ -n "$rate" ]]; then
    local bits=${rate%bit} mult=1
    case "$bits" in *k) mult=1000 ;; *m) mult=1000000 ;; *g) mult=1000000000 ;; esac
    bits=${bits%[kmg]}
    burst=$(( bits * mult / 8 / 250 ))
    (( burst >= 16384 )) || burst=16384
    if [[ -n "${NODES_BURST:-}" ]]; then
      [[ "$NODES_BURST" =~ ^[0-9]{4,9}$ ]] || die "up: NODES_BURST must be a byte count (1000..999999999), got '$NODES_BURST'"
      burst=$NODES_BURST
    fi
    echo "NODES_BURST=$burst"
  fi
  for k in $(seq 0 $((n - 1))); do
    local name host peer addr
    name=$(ns "$id" "$k") host="en${id}h$k" peer="en${id}p$k" addr="10.77.$id.$((k + 1))"
    ip netns add "$name"
    ip link add "$host" type veth peer name "$peer"
    ip link set "$host" master "$(br "$id")" up
    ip link set "$peer" netns "$name"
    ip -n "$name" link set lo up
    ip -n "$name" link set "$peer" name eth0
    ip -n "$name" addr add "$addr/24" dev eth0
    ip -n "$name" link set eth0 up
    if [[ -n "$rate" ]]; then  # both directions: into the node (host side) and out of it
      tc qdisc add dev "$host" root tbf rate "$rate" burst "$burst" latency 50ms
      tc -n "$name" qdisc add dev eth0 root tbf rate "$rate" burst "$burst" latency 50ms
    fi
    echo "NODE${k}_ADDR=$addr"
  done
}

cmd_run() {
  local id="$1" k="$2"
  shift 2
  [[ $# -gt 0 ]] || die "run: no command"
  ip netns list | grep -qw "$(ns "$id" "$k")" || die "run: node $k of set $id does not exist (bash tools/nodes.sh up ...)"
  # A new UTS and mount namespace per command: hostname node<k>, a private /dev/shm.
  exec ip netns exec "$(ns "$id" "$k")" unshare --uts --mount --propagation private \
    sh -c 'hostname "node$1-$2" && mount -t tmpfs -o size=2g tmpfs /dev/shm && shift 2 && exec "$@"' sh "$id" "$k" "$@"
}

cmd_link() {
  local id="$1" k="$2" state="${3:-}"
  [[ "$state" == up || "$state" == down ]] || die "link: the state must be up or down, got '$state'"
  ip netns list | grep -qw "$(ns "$id" "$k")" || die "link: node $k of set $id does not exist"
  ip -n "$(ns "$id" "$k")" link set eth0 "$state"
}

# Node k's own interface MTU. The bridge's ports, the "switch", keep theirs (1500): a node
# given 9000 sends frames the switch drops, as a real one does, while small packets pass.
# Its frames leave one segment at a time (gso_max_segs 1): a veth otherwise hands the
# bridge 64 KB super-packets, which pass whatever the MTU, and the loss would be partial.
cmd_mtu() {
  local id="$1" k="$2" mtu="${3:-}"
  [[ "$mtu" =~ ^[0-9]+$ && "$mtu" -ge 576 && "$mtu" -le 65535 ]] || die "mtu: the MTU must be 576..65535, got '$mtu'"
  ip netns list | grep -qw "$(ns "$id" "$k")" || die "mtu: node $k of set $id does not exist"
  ip -n "$(ns "$id" "$k")" link set eth0 mtu "$mtu" gso_max_segs 1
}

cmd_down() {
  local id="$1"
  for name in $(ip netns list | awk '{print $1}' | grep -E "^en${id}n[0-9]+$" || true); do
    for pid in $(ip netns pids "$name" 2>/dev/null); do kill -9 "$pid" 2>/dev/null || true; done
    ip netns del "$name" 2>/dev/null || true
  done
  # The host's veth ends, deleted here (each takes its node's end with it): a namespace
  # outlives its deletion while a socket still holds it (a connection that was cut keeps
  # retrying for minutes), and so would its veth pair.
  for link in $(ip -br link | awk '{print $1}' | sed 's/@.*//' | grep -E "^en${id}h[0-9]+$" || true); do
    ip link del "$link" 2>/dev/null || true
  done
  ip link del "$(br "$id")" 2>/dev/null || true
}

case "${1:-}" in
  check) cmd_check ;;
  up) shift; cmd_up "$@" ;;
  run) shift; cmd_run "$@" ;;
  link) shift; cmd_link "${1:?link: which NODES_ID}" "${2:?link: which node}" "${3:-}" ;;
  mtu) shift; cmd_mtu "${1:?mtu: which NODES_ID}" "${2:?mtu: which node}" "${3:-}" ;;
  down) shift; cmd_down "${1:?down: which NODES_ID}" ;;
  *) die "usage: nodes.sh check | up N [RATE] | run ID K CMD... | link ID K up|down | mtu ID K N | down ID" ;;
esac
