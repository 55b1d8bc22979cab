#!/usr/bin/env bash
# Two machines whose interfaces carry jumbo frames (MTU 9000), with a switch between them
# that carries 1500: an MTU black hole. The ranks meet (the rendezvous and the mesh's
# hellos are small packets), then the first large all-reduce stalls, because every
# full-size segment is dropped on the way and no machine is told (an L2 switch sends no
# "fragmentation needed"). It looks like a machine gone, and the ranks used to say only
# that: "its machine is down, or the network to it is". They now add that the connection
# sends 8948-byte segments and what an MTU mismatch looks like. With the machines back at
# 1500 the same job runs: the mismatch, not the size of the all-reduce, is what fails.
#
# Emulated machines (tools/nodes.sh: `mtu` sets a node's MTU; the bridge, the switch,
# keeps 1500), one rank each, so the all-reduce is the TCP ring. Skips (and passes) where
# namespaces cannot be made.
source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 2
probe="$root/tests/dist/launch_probe"

# One launcher per machine, 1 rank each, all-reducing 4M float32 (16 MB) across them.
run_pair() {
  local port=$1
  for k in 1 0; do
    PROBE_SHARED_FLOATS=4000000 ENGINE_DIST_TIMEOUT=60 ENGINE_LINK_TIMEOUT=4 timeout 100 bash "$nodes" run "$NODES_ID" $k \
      "$launch" --nnodes=2 --nproc_per_node=1 --master_addr="$NODE0_ADDR" --master_port="$port" --job_token="$token" \
      --node_rank=$k "$probe" >"$out.$k" 2>&1 &
    pids[$k]=$!
  done
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
}

for k in 0 1; do bash "$nodes" mtu "$NODES_ID" $k 9000; done
start=$(date +%s.%N)
run_pair 29830
seconds=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
cat "$out.0" "$out.1"
[[ $rc0 -ne 0 || $rc1 -ne 0 ]] || fail "the all-reduce should not get through a switch that drops every full-size frame"
grep -q "attempt 0" "$out.1" || fail "the ranks should have met (their rendezvous is small packets)"
grep -qE "has not answered at the network level for 4 s \(ENGINE_LINK_TIMEOUT\): its machine is down, or the network to it is .*\. If that machine is up: this connection sends segments of 8948 bytes \(a path MTU of 9000\), and a link or switch between the machines with a smaller MTU drops every such packet while small messages pass \(an MTU mismatch\)" \
  "$out.0" "$out.1" || fail "a rank should name the link timeout and the jumbo segments its connection sends"
awk -v s="$seconds" 'BEGIN { exit !(s < 40) }' || fail "the black hole took $seconds s to be named (link timeout 4 s, collective timeout 60 s)"
echo "ok: an MTU black hole (9000 on the machines, 1500 between): named after $seconds s, with the segment size"

for k in 0 1; do bash "$nodes" mtu "$NODES_ID" $k 1500; done
run_pair 29831
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { cat "$out.0" "$out.1"; fail "the same job at MTU 1500 should run"; }
grep -q "shared buffer sum right" "$out.0" && grep -q "shared buffer sum right" "$out.1" || fail "wrong sums at MTU 1500"
echo "ok: the same job with both machines at MTU 1500: the 16 MB all-reduce is right on both"
