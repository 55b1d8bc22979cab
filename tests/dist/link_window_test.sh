#!/usr/bin/env bash
# A machine lost while its receive window is closed is taken for lost within the link
# timeout (ENGINE_LINK_TIMEOUT), like any other machine lost hard (machine_loss_test.sh,
# section 3).
#
# Why this case needs its own test: rank 1 (machine 1) stalls while rank 0 (machine 0)
# sends it 32 MiB, more than the two socket buffers hold, so rank 1's window closes. Rank
# 0's TCP then probes the closed window at intervals that double, up to 2 minutes by
# default; a live machine answers each probe, so nothing is outstanding between them and
# nothing looks lost. If machine 1 dies 16 s into the stall, the next probe would leave
# about 10 s later, and the link check could see it unanswered only then: ~15 s, where
# the bound is 4 s. watch_link caps those intervals at a third of the bound
# (TCP_RTO_MAX_MS), so the loss is seen about 5 s after the cut.
#
# Emulated machines (tools/nodes.sh), one rank each, so the all-reduce is the TCP ring.
# Machine 1 is cut off and everything on it killed; its link stays down, so nothing of
# it ever reaches machine 0 again. Skips (and passes) where namespaces cannot be made.
source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 2
out="$TEST_TMPDIR/window"
fail() {
  cat "$out.0" "$out.1"
  echo "FAIL: $*"
  exit 1
}

for k in 1 0; do
  ENGINE_DIST_TIMEOUT=90 ENGINE_LINK_TIMEOUT=4 timeout 200 bash "$nodes" run "$NODES_ID" $k "$launch" --nnodes=2 \
    --nproc_per_node=1 --master_addr="$NODE0_ADDR" --master_port=29800 --job_token="$token" --node_rank=$k \
    "$probe" --stall-rank 1 --stall-elements $((16 << 20)) >"$out.$k" 2>&1 &
  pids[$k]=$!
done
for _ in $(seq 1 3000); do grep -q "rank 1: stalling" "$out.1" && break; sleep 0.02; done
grep -q "rank 1: stalling" "$out.1" || fail "rank 1 never stalled"
sleep 16  # rank 1's window has been closed for 16 s: unbounded, the probes are ~13 s apart by now
echo "machine 0's connection to machine 1 before the cut (Send-Q: bytes waiting for the window; persist: the next probe):"
ip netns exec "en${NODES_ID}n0" ss -tio dst "$NODE1_ADDR" | grep -A1 "ESTAB" || true
bash "$nodes" link "$NODES_ID" 1 down
cut_at=$(date +%s.%N)
{  # (the shell's "Killed" line for machine 1's launcher says nothing new)
  for p in $(pgrep -f "dist/launch|multinode_probe" || true); do
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n1" ]] && kill -9 "$p"
  done
  wait "${pids[1]}"
} 2>/dev/null || true
wait "${pids[0]}" && rc0=0 || rc0=$?
seconds=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
cat "$out.0"
[[ $rc0 -ne 0 ]] || fail "machine 0 should fail when machine 1 is lost"
grep -qE "^\[rank 0\] .*all_reduce\(SUM, 16777216 x float32\) .* rank 1 on another machine \(10\.77\.$NODES_ID\.2\) has not answered at the network level for 4 s \(ENGINE_LINK_TIMEOUT\): its machine is down" \
  "$out.0" || fail "rank 0 should name rank 1, its machine's address and the link timeout"
awk -v s="$seconds" 'BEGIN { exit !(s < 10) }' ||
  fail "machine 0 took $seconds s to take machine 1 for lost (link timeout 4 s; the closed window's probes were not capped?)"
echo "ok: machine 1 lost while its receive window was closed: taken for lost after $seconds s (link timeout 4 s, collective timeout 90 s)"
