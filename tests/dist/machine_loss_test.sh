#!/usr/bin/env bash
# Whole machines lost: 3 emulated machines (tools/nodes.sh), 2 ranks on each of machines 0
# and 1 (machine 2 stands by), one launcher per machine. The recap resumes from its saved
# state, and every job that survives ends with the weights of the same run uninterrupted,
# bit for bit.
#   1. A machine lost whole (machine 1, then machine 0, which serves the rendezvous, then
#      each again under c10d, where machine 0 serves the endpoint) and its launcher started
#      afresh: it joins the job's restart.
#   2. Under c10d, a machine that failed hard (no connection closed) takes its node rank back.
#   3. A machine that fails hard mid-run is taken for lost within the link timeout, not the
#      collective timeout, and the job resumes when it is started again (a, b), or when a
#      spare machine replaces it before the others have noticed (c).
#   4. Under c10d, the endpoint's machine fails hard: the other launcher finds the endpoint
#      silent, meets the new one when the machine is back, and the job resumes.
# Skips (and passes) where namespaces cannot be made, saying why.
source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 3
run_straight 29640

# fail_hard K: machine K fails hard (power, a kernel panic). Emulated: cut off, everything
# on it killed, and its sockets destroyed (ss -K), so that no FIN or reset ever leaves it,
# even once its link is back. Sets cut_at. Returns 1 where ss -K cannot destroy sockets
# (TIME-WAIT: connections closed earlier, which send nothing, are left).
fail_hard() {
  local k=$1 ns="en${NODES_ID}n$1"
  bash "$nodes" link "$NODES_ID" "$k" down
  cut_at=$(date +%s.%N)
  for p in $(pgrep -f "dist/launch|13_recap_main|multinode_probe" || true); do
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "$ns" ]] && kill -9 "$p"
  done
  wait "${pids[$k]}" || true
  local left=""
  for _ in $(seq 1 30); do  # again while the killed processes are still exiting, closing sockets
    ip netns exec "$ns" ss -K dst "10.77.$NODES_ID.0/24" >/dev/null 2>&1 || true
    left=$(ip netns exec "$ns" ss -tan | grep -v TIME-WAIT | grep " 10\.77\.$NODES_ID\.[0-9]*:" || true)
    [[ -n "$left" ]] || return 0
    sleep 0.1
  done
  echo "machine $k's sockets that ss -K left: $left"
  return 1
}
cannot_fail_hard() {  # cannot_fail_hard SECTION: says so, and stops machine 0's job
  echo "SKIPPED (section $1): ss -K cannot destroy sockets on this kernel, so a hard failure cannot be emulated"
  kill "${pids[0]}" "${pids[1]}" 2>/dev/null || true
  wait "${pids[0]}" "${pids[1]}" || true
}

# 1. A machine lost whole (its launcher killed, as when the machine fails; its ranks go with
# it) and its launcher started afresh: the other machine's launcher restarts the job
# (restart 1), the new launcher starts at restart 0. Machine 1's ranks join the job's
# restart 1; machine 0's rank 0, whose store is still forming, takes up the restart that
# machine 1's ranks come with. Either way the recap resumes and ends with the very weights
# of the uninterrupted run.

# kill_launcher K PORT: machine K's launcher killed, as when the machine fails (its ranks go
# with it); the machine comes back a second later.
kill_launcher() {
  local k=$1 port=$2 victim=""  # machine k's launcher: the one in its network namespace
  for p in $(pgrep -x launch || true); do
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n$k" ]] &&
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE -- "[=:]$port " && victim=$p
  done
  [[ -n "$victim" ]] || fail "machine $k's launcher was not running when the first training state was saved"
  kill -9 "$victim"
  wait "${pids[$k]}" || true
  sleep 1
}
# await_endpoint_gone PORT LOG: until machine 1's launcher (LOG) has found the endpoint on
# machine 0 gone; sets gone_after, the seconds since cut_at.
await_endpoint_gone() {
  local line="^launch: the rendezvous endpoint at $NODE0_ADDR:$1 has gone"
  for _ in $(seq 1 600); do grep -q "$line" "$2" && break; sleep 0.1; done
  gone_after=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
  grep -q "$line" "$2" || { cat "$2"; fail "machine 1 should find the endpoint gone within 60 s of machine 0's hard failure"; }
  # The link timeout (4 s), the link check's second look, then 5 s without an answer.
  awk -v s="$gone_after" 'BEGIN { exit !(s < 18) }' || fail "machine 1 took $gone_after s to find the endpoint gone"
}
# lose_machine K PORT [c10d [hard]]: static node ranks, or handed out at the endpoint;
# machine K's launcher killed, or the whole machine failed hard (section 4).
lose_machine() {
  local k=$1 port=$2 c10d=${3:-} how=${4:-} other=$((1 - $1))
  local state="$TEST_TMPDIR/lost$k$c10d$how.state.safetensors" tag="lost$k$c10d$how" link_timeout=30
  [[ -z "$how" ]] || link_timeout=4
  local job=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port="$port" --job_token="$token"
    --max_restarts=1)
  [[ -z "$c10d" ]] || job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$NODE0_ADDR:$port"
    --job_token="$token" --max_restarts=1)
  start_node() {  # start_node NODE SUFFIX: that machine's launcher, in the background
    local node_rank=(--node_rank="$1")
    [[ -z "$c10d" ]] || node_rank=()
    LESSON_OUT="$TEST_TMPDIR/$tag.$1$2" ENGINE_DIST_TIMEOUT=20 ENGINE_LINK_TIMEOUT=$link_timeout timeout 120 \
      bash "$nodes" run "$NODES_ID" "$1" "$launch" "${job[@]}" "${node_rank[@]}" "$recap" "${resumable[@]}" \
      --state "$state" --checkpoint "$TEST_TMPDIR/$tag.$1.safetensors" >"$out.$tag.$1$2" 2>&1 &
  }
  start_node 0 "" && pids[0]=$!
  [[ -z "$c10d" ]] || sleep 0.5  # machine 0 serves the endpoint and is node 0
  start_node 1 "" && pids[1]=$!
  for _ in $(seq 1 6000); do [[ -s "$state" ]] && break; sleep 0.01; done
  [[ -s "$state" ]] || fail "the run that loses machine $k saved no training state within 60 s"
  if [[ -n "$how" ]]; then
    fail_hard "$k" || { cannot_fail_hard 4; return; }
    await_endpoint_gone "$port" "$out.$tag.$other"
    bash "$nodes" link "$NODES_ID" "$k" up
  else
    kill_launcher "$k" "$port"
  fi
  start_node "$k" ".again" && pids[$k]=$!
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
  local out_k="$out.$tag.$k.again" out_other="$out.$tag.$other"
  cat "$out_other" "$out_k"
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the job should survive losing machine $k and its restart (exit $rc0, $rc1)"
  grep -q "restarting the group (restart 1 of 1)" "$out_other" || fail "machine $other should restart the job"
  grep -q "^\[rank $((k * 2))\] \[dist\] rank $((k * 2)): this machine's launcher is at restart 0, the job at restart 1 .*joining the job's restart 1" \
    "$out_k" || fail "machine $k's ranks should say that they join the job's restart 1"
  grep -qE "^\[rank 0\] resumed from .*after a restart by the launcher" "$out.$tag.0"* ||
    fail "the recap should resume from its saved state"
  [[ -z "$c10d" ]] || grep -q "^launch: node rank $k of 2" "$out_k" || fail "machine $k should take node rank $k back"
  [[ -z "$c10d" || $k -ne 0 ]] || grep -q "^launch: the rendezvous endpoint at $NODE0_ADDR:$port has gone" "$out_other" ||
    fail "machine 1 should find the endpoint gone, and meet it again"
  "$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/$tag.0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
    fail "the job that lost machine $k should end with the weights of the uninterrupted one, bit for bit"
  [[ -z "$how" ]] || echo "ok: machine 1 found the endpoint gone $gone_after s after machine 0 failed hard (link timeout 4 s, then 5 s without an answer)"
  echo "ok: machine $k lost${how:+ ($how)} and its launcher started afresh${c10d:+ (c10d)}: it joined the job's restart 1, which ended bit-identical"
}
lose_machine 1 29700
lose_machine 0 29710
lose_machine 1 29720 c10d  # its launcher takes node rank 1 back at the endpoint
lose_machine 0 29725 c10d  # the endpoint's machine: it serves a new one, which machine 1 meets

# 2. A machine that fails hard (power, a kernel panic) closes none of its connections. Under
# c10d its launcher's connection to the endpoint then looks alive, holding node rank 1: the
# endpoint probes such a connection (TCP keepalive, after 10 s idle) and frees the rank when
# the restarted machine answers with a reset. Emulated: machine 1 cut off, its launcher
# killed, its last socket destroyed (ss -K) so that no FIN ever leaves, the link back up.
hard=(--nnodes=2 --nproc_per_node=1 --rdzv_backend=c10d --rdzv_endpoint="$NODE0_ADDR:29730" --job_token="$token")
timeout 120 bash "$nodes" run "$NODES_ID" 0 "$launch" "${hard[@]}" /bin/sleep 60 >"$out.hard.0" 2>&1 &
hard_host=$!
sleep 0.5
timeout 120 bash "$nodes" run "$NODES_ID" 1 "$launch" "${hard[@]}" /bin/sleep 60 >"$out.hard.1" 2>&1 &
hard_lost=$!
for _ in $(seq 1 500); do grep -q "node rank 1 of 2" "$out.hard.1" && break; sleep 0.02; done
grep -q "node rank 1 of 2" "$out.hard.1" || { cat "$out.hard.1"; fail "machine 1's launcher got no node rank"; }
sleep 1  # until all it was sent is acknowledged: a machine failing later leaves nothing to resend
bash "$nodes" link "$NODES_ID" 1 down
for p in $(pgrep -x launch || true); do
  [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n1" ]] && kill -9 "$p"
done
wait "$hard_lost" || true
ip netns exec "en${NODES_ID}n1" ss -K dst "$NODE0_ADDR" >/dev/null 2>&1 || true
if ip netns exec "en${NODES_ID}n1" ss -tan | grep -q "$NODE0_ADDR:29730"; then
  echo "SKIPPED (section 2): ss -K cannot destroy sockets on this kernel, so a hard failure cannot be emulated"
  bash "$nodes" link "$NODES_ID" 1 up
else
  bash "$nodes" link "$NODES_ID" 1 up
  start=$(date +%s.%N)
  ENGINE_DIST_TIMEOUT=60 timeout 120 bash "$nodes" run "$NODES_ID" 1 "$launch" "${hard[@]}" /bin/true \
    >"$out.hard.again" 2>&1 && rc1=0 || rc1=$?
  seconds=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
  cat "$out.hard.again"
  [[ $rc1 -eq 0 ]] && grep -q "^launch: node rank 1 of 2" "$out.hard.again" ||
    fail "machine 1, failed hard and started again, should take node rank 1 back (exit $rc1, $seconds s)"
  awk -v s="$seconds" 'BEGIN { exit !(s < 40) }' || fail "taking node rank 1 back took $seconds s"
  echo "ok: machine 1 failed hard (no connection closed) and started again took node rank 1 back after $seconds s"
fi
kill "$hard_host" 2>/dev/null || true
wait "$hard_host" || true

# 3. A machine that fails hard mid-run, under a long collective timeout (90 s): machine 0's
# ranks take machine 1's for lost when its TCP stops answering, ENGINE_LINK_TIMEOUT (4 s)
# after, not at the timeout.
lost_at_link_timeout() {  # lost_at_link_timeout LOG: machine 0's ranks named rank 2 and the link timeout
  for r in 0 1; do
    grep -qE "^\[rank $r\] .*rank 2 on another machine \(10\.77\.$NODES_ID\.2\) has not answered at the network level for 4 s \(ENGINE_LINK_TIMEOUT\): its machine is down" \
      "$1" || { cat "$1"; fail "rank $r should name rank 2, its machine's address and the link timeout"; }
  done
  awk -v s="$seconds" 'BEGIN { exit !(s < 30) }' || fail "machine 0 took $seconds s to take machine 1 for lost (link timeout 4 s)"
}
linked=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --job_token="$token")

# 3a. Machine 0 waits to receive, all it sent acknowledged: keepalive finds the silence.
for k in 1 0; do
  ENGINE_DIST_TIMEOUT=90 ENGINE_LINK_TIMEOUT=4 timeout 200 bash "$nodes" run "$NODES_ID" $k "$launch" "${linked[@]}" \
    --master_port=29740 --node_rank=$k "$probe" --stall-rank 2 >"$out.stall.$k" 2>&1 &
  pids[$k]=$!
done
for _ in $(seq 1 3000); do grep -q "rank 2: stalling" "$out.stall.1" && break; sleep 0.02; done
grep -q "rank 2: stalling" "$out.stall.1" || { cat "$out.stall.0" "$out.stall.1"; fail "rank 2 never stalled"; }
sleep 1  # machine 0's part is sent and acknowledged
if fail_hard 1; then
  wait "${pids[0]}" && rc0=0 || rc0=$?
  seconds=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
  cat "$out.stall.0"
  [[ $rc0 -ne 0 ]] || fail "machine 0 should fail when machine 1 fails hard"
  lost_at_link_timeout "$out.stall.0"
  echo "ok: machine 1 failed hard while machine 0 waited to receive: taken for lost after $seconds s (link timeout 4 s, collective timeout 90 s)"
else
  cannot_fail_hard 3a
fi
kill "${pids[0]}" 2>/dev/null || true
wait "${pids[0]}" || true
bash "$nodes" link "$NODES_ID" 1 up

# start_linked TAG PORT MACHINE NODE_RANK MAX_RESTARTS [SUFFIX]: the recap on MACHINE under
# the link timeout, in the background (output $out.TAG.MACHINE[SUFFIX], weights
# TAG<MACHINE>.safetensors); await_state TAG: until its first training state is saved.
start_linked() {
  local tag=$1 port=$2 machine=$3 node_rank=$4 restarts=$5 suffix=${6:-}
  LESSON_OUT="$TEST_TMPDIR/$tag$machine$suffix" ENGINE_DIST_TIMEOUT=90 ENGINE_LINK_TIMEOUT=4 timeout 200 \
    bash "$nodes" run "$NODES_ID" "$machine" "$launch" "${linked[@]}" --master_port="$port" \
    --max_restarts="$restarts" --node_rank="$node_rank" "$recap" "${resumable[@]}" \
    --state "$TEST_TMPDIR/${tag}_state.safetensors" --checkpoint "$TEST_TMPDIR/$tag$machine.safetensors" \
    >"$out.$tag.$machine$suffix" 2>&1 &
  pids[$machine]=$!
}
await_state() {
  for _ in $(seq 1 6000); do [[ -s "$TEST_TMPDIR/$1_state.safetensors" ]] && break; sleep 0.01; done
  [[ -s "$TEST_TMPDIR/$1_state.safetensors" ]] || fail "the $1 run saved no training state within 60 s"
}

# 3b. The recap mid-step, machine 0's gradients unacknowledged: the link check finds the
# silence. The job restarts, machine 1 joins it when started again, and the recap ends with
# the weights of the uninterrupted run.
start_linked hard 29750 0 0 1
start_linked hard 29750 1 1 1
await_state hard
if fail_hard 1; then
  for _ in $(seq 1 800); do grep -q "restarting the group" "$out.hard.0" && break; sleep 0.1; done
  seconds=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
  grep -q "restarting the group (restart 1 of 1)" "$out.hard.0" ||
    { cat "$out.hard.0"; fail "machine 0 did not restart the job within 80 s of machine 1's hard failure"; }
  lost_at_link_timeout "$out.hard.0"
  bash "$nodes" link "$NODES_ID" 1 up
  start_linked hard 29750 1 1 1 .again
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
  cat "$out.hard.0" "$out.hard.1.again"
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the job should survive machine 1's hard failure and its restart (exit $rc0, $rc1)"
  "$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/hard0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
    fail "the job whose machine 1 failed hard should end with the weights of the uninterrupted one, bit for bit"
  echo "ok: machine 1 failed hard mid-step: taken for lost after $seconds s (link timeout 4 s, collective timeout 90 s); the job resumed bit-identical"
else
  cannot_fail_hard 3b
fi
bash "$nodes" link "$NODES_ID" 1 up

# 3c. A spare machine (machine 2) replaces machine 1 at once, before machine 0 has noticed
# the loss: its ranks meet the group still running, their ranks held by machine 1's dead
# ones, and wait for the job's restart, which they join. Its launcher has --max_restarts=0:
# the wait costs no restart (before, its ranks failed at once, "two processes claim RANK=2").
start_linked spare 29760 0 0 1
start_linked spare 29760 1 1 1
await_state spare
if fail_hard 1; then
  start_linked spare 29760 2 1 0
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[2]}" && rc2=0 || rc2=$?
  cat "$out.spare.0" "$out.spare.2"
  [[ $rc0 -eq 0 && $rc2 -eq 0 ]] || fail "the spare machine should take machine 1's place (exit $rc0, $rc2)"
  grep -qE "^\[rank 2\] \[dist\] rank 2: the job's process group is still running with rank 2 held by pid [0-9]+ on node$NODES_ID-1" \
    "$out.spare.2" || fail "the spare machine's rank 2 should say that its rank is held by machine 1's dead rank 2, and wait"
  grep -q "joining the job's restart 1" "$out.spare.2" || fail "the spare machine should join the job's restart 1"
  "$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/spare0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
    fail "the job that a spare machine joined should end with the weights of the uninterrupted one, bit for bit"
  echo "ok: a spare machine replaced machine 1 before the loss was noticed: it waited, joined the job's restart 1, and the job ended bit-identical"
else
  cannot_fail_hard 3c
fi
bash "$nodes" link "$NODES_ID" 1 up

# 4. Under c10d, the machine that serves the endpoint (machine 0) fails hard. Machine 1's
# ranks take it for lost at the link timeout; before restarting the job, its launcher asks
# the endpoint whether it still serves it, and the endpoint's silence (no answer in 5 s,
# nothing closed) counts as gone. The machine stays cut off until then; when it is back,
# its launcher serves a new endpoint, which machine 1's launcher meets.
lose_machine 0 29727 c10d hard

echo PASS
