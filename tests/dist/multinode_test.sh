#!/usr/bin/env bash
# Several machines for real: 2 emulated machines (tools/nodes.sh: own network namespace,
# address, hostname and /dev/shm) with 2 ranks each, one launcher per machine.
#   1. every collective equals its closed form, and DDP equals one process on the global
#      batch, across the machines;
#   2. the all-reduce is hierarchical: shared memory within a machine, never across;
#   3. a rank killed on machine 1 is named on machine 0 within seconds;
#   4. lesson 2's recap trained across the 2 machines ends with the weights of the same run
#      on one machine with 4 ranks (same global batch; only the order of the sums differs);
#   5. a rank killed on machine 1 mid-run: both launchers (--max_restarts=1) start the job
#      again, the recap resumes from its saved state, and ends with the very weights of the
#      same run uninterrupted;
#   6. torchrun's c10d form: the same command on both machines, no --node_rank; the
#      launchers get their node ranks at the endpoint on machine 0;
#   7. the network between the machines cut mid-run: every rank stops within the timeout,
#      and the ranks that waited across it name the rank, its address and the network;
#   8. a network blip shorter than the timeout: the run goes on, to the weights of 5;
#   9. ENGINE_SOCKET_IFNAME=lo on one machine: every rank names the loopback address at once;
#  10. a machine lost whole (machine 1, then machine 0, which serves the rendezvous, then
#      machine 1 and machine 0, which serves the endpoint, under c10d) and its launcher
#      started afresh: it joins the job's restart, and the recap ends with the weights of 5;
#  11. under c10d, a machine that failed hard (no connection closed) takes its node rank back;
#  12. a machine that fails hard mid-run is taken for lost within the link timeout, not the
#      collective timeout, and the job resumes when it is started again, or when a spare
#      machine replaces it before the others have noticed.
# Skips (and passes) where namespaces cannot be made, saying why.
set -euo pipefail
root="$TEST_SRCDIR/ddp_engine"
nodes="$root/tools/nodes.sh"
probe="$root/tests/dist/multinode_probe"
launch="$root/dist/launch"
recap="$root/lessons/02_ddp_basics/13_recap_main"
if ! why=$(bash "$nodes" check); then
  echo "SKIPPED: cannot emulate machines here: $why"
  exit 0
fi
eval "$(bash "$nodes" up 3)"  # machine 2 stands by, to replace machine 1 in section 12c
trap 'bash "$nodes" down "$NODES_ID"' EXIT
trap 'exit 1' TERM INT  # a timeout or ^C still removes the machines
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
fail() { echo "FAIL: $*"; exit 1; }

# run_job PORT OUT_PREFIX [probe flags]: one launcher per machine; returns when both end.
# With PROGRAM set, runs it instead of the probe.
run_job() {
  local port=$1 out=$2 program=${PROGRAM:-$probe}
  shift 2
  local common=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port="$port" --job_token="$token")
  ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 1 "$launch" "${common[@]}" --node_rank=1 "$program" "$@" \
    >"$out.1" 2>&1 &
  local other=$!
  local start=$(date +%s.%N)
  ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 0 "$launch" "${common[@]}" --node_rank=0 "$program" "$@" \
    >"$out.0" 2>&1 && rc0=0 || rc0=$?
  wait $other && rc1=0 || rc1=$?
  seconds=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.2f", e - s }')
}

out="$TEST_TMPDIR/job"
run_job 29600 "$out"
cat "$out.0" "$out.1"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the job failed (machine 0: exit $rc0, machine 1: exit $rc1)"
for r in 0 1 2 3; do
  node=$((r / 2))
  grep -qE "^\[rank $r\] rank $r on node$NODES_ID-$node at 10\.77\.$NODES_ID\.$((node + 1)):[0-9]+: all_reduce runs hierarchical over 2 machines; ranks here: $((node * 2)),$((node * 2 + 1))$" "$out.$node" ||
    fail "rank $r should run on machine $node (hostname node$NODES_ID-$node, address 10.77.$NODES_ID.$((node + 1))) with the hierarchical all-reduce"
  grep -q "^\[rank $r\] rank $r: every collective equals its closed form" "$out.$node" || fail "rank $r: collectives"
  grep -qE "^\[rank $r\] rank $r: DDP vs one process on the global batch" "$out.$node" || fail "rank $r: DDP"
done
echo "ok: 2 machines x 2 ranks: every collective equals its closed form, DDP equals one process"
echo "ok: each machine's ranks share memory (hierarchical), the machines talk over their own addresses"

run_job 29610 "$out.die" --die-rank 2
cat "$out.die.0" "$out.die.1"
[[ $rc0 -ne 0 ]] || fail "machine 0 should fail when rank 2 on machine 1 dies"
grep -q "rank 2" "$out.die.0" || fail "machine 0 does not name rank 2"
awk -v s="$seconds" 'BEGIN { exit !(s < 15) }' || fail "machine 0 took $seconds s to stop (the timeout is 20 s)"
echo "ok: rank 2, killed on machine 1, is named on machine 0 ($seconds s for the whole job)"

# 4. The recap across machines against one machine. Rank 0 (on machine 0) saves the model.
small=(--epochs 2 --train-limit 4096 --test-limit 1000)
LESSON_OUT="$TEST_TMPDIR/two" PROGRAM="$recap" run_job 29620 "$out.recap" "${small[@]}" \
  --checkpoint "$TEST_TMPDIR/two_machines.safetensors"
cat "$out.recap.0" "$out.recap.1"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the recap across 2 machines failed (machine 0: exit $rc0, machine 1: exit $rc1)"
grep -q "^\[rank 0\] Fashion-MNIST, mlp, DDP over 4 processes" "$out.recap.0" ||
  fail "the recap should run one job of 4 processes over the 2 machines"
LESSON_OUT="$TEST_TMPDIR/one" ENGINE_DIST_TIMEOUT=20 timeout 120 "$launch" --nproc_per_node=4 --master_port=29630 \
  "$recap" "${small[@]}" --checkpoint "$TEST_TMPDIR/one_machine.safetensors" >"$out.recap.one" 2>&1 ||
  { cat "$out.recap.one"; fail "the recap on one machine with 4 processes failed"; }
grep "epoch" "$out.recap.one"
"$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/two_machines.safetensors" "$TEST_TMPDIR/one_machine.safetensors" 1e-5 ||
  fail "the recap across 2 machines should end with the weights of the same run on one machine"
echo "ok: the recap across 2 machines x 2 ranks ends with the weights of 4 ranks on one machine"

# 5. Restarted on both machines, resumed exactly. The state lives where both machines read
# it (these machines share the file system; on real ones, a shared --state path).
resumable=(--epochs 2 --train-limit 12000 --test-limit 1000 --save-every 10)
LESSON_OUT="$TEST_TMPDIR/straight" PROGRAM="$recap" run_job 29640 "$out.straight" "${resumable[@]}" \
  --state "$TEST_TMPDIR/straight_state.safetensors" --checkpoint "$TEST_TMPDIR/straight.safetensors"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { cat "$out.straight.0" "$out.straight.1"; fail "the uninterrupted recap failed"; }
state="$TEST_TMPDIR/resumed_state.safetensors"
restartable=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port=29650 --job_token="$token"
  --max_restarts=1)
for k in 1 0; do
  LESSON_OUT="$TEST_TMPDIR/resumed$k" ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" $k "$launch" \
    "${restartable[@]}" --node_rank=$k "$recap" "${resumable[@]}" --state "$state" \
    --checkpoint "$TEST_TMPDIR/resumed$k.safetensors" >"$out.resumed.$k" 2>&1 &
  pids[$k]=$!
done
# Up to 60 s for the first save (10 steps): a sanitizer build or a busy machine is slow to start.
for _ in $(seq 1 6000); do [[ -s "$state" ]] && break; sleep 0.01; done
[[ -s "$state" ]] || fail "no training state was saved within 60 s of the start, so there is nothing to resume"
sleep 0.05
victim=""
for p in $(pgrep -f "13_recap_main.*resumed1.safetensors" || true); do
  tr '\0' '\n' <"/proc/$p/environ" 2>/dev/null | grep -qx "RANK=3" && victim=$p
done
[[ -n "$victim" ]] || fail "rank 3 was not running when the first training state was saved"
kill -9 "$victim"
wait "${pids[0]}" && rc0=0 || rc0=$?
wait "${pids[1]}" && rc1=0 || rc1=$?
cat "$out.resumed.0" "$out.resumed.1"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the restarted job failed (machine 0: exit $rc0, machine 1: exit $rc1)"
grep -q "rank 3 (pid $victim) was killed by signal 9" "$out.resumed.1" || fail "machine 1 should name rank 3, killed"
grep -q "restarting the group (restart 1 of 1)" "$out.resumed.0" || fail "machine 0 should restart its ranks too"
grep -qE "^\[rank 0\] resumed from .*after a restart by the launcher" "$out.resumed.0" ||
  fail "the recap should resume from its saved state after the restart"
"$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/resumed0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
  fail "the restarted run should end with the weights of the uninterrupted one, bit for bit"
echo "ok: rank 3 killed on machine 1; both machines restarted the job, it resumed, and ended bit-identical"

# 6. One command for every machine.
c10d=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$NODE0_ADDR:29660" --job_token="$token")
ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 1 "$launch" "${c10d[@]}" "$probe" >"$out.c10d.1" 2>&1 &
other=$!
ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 0 "$launch" "${c10d[@]}" "$probe" >"$out.c10d.0" 2>&1 &&
  rc0=0 || rc0=$?
wait $other && rc1=0 || rc1=$?
cat "$out.c10d.0" "$out.c10d.1"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "the c10d job failed (machine 0: exit $rc0, machine 1: exit $rc1)"
grep -q "^launch: node rank 0 of 2, handed out at the rendezvous (served here)" "$out.c10d.0" ||
  fail "machine 0, which has the endpoint's address, should serve it and be node 0"
grep -q "^launch: node rank 1 of 2" "$out.c10d.1" || fail "machine 1 should be node 1"
for r in 2 3; do
  grep -q "^\[rank $r\] rank $r: every collective equals its closed form" "$out.c10d.1" || fail "rank $r: collectives"
done
echo "ok: the same c10d command on both machines formed one job of 4 ranks"

# 7. The network between the machines cut mid-run: no rank hangs, and the ranks that waited
# across it name the rank, its machine's address and the network.
cut_timeout=5
for k in 1 0; do
  LESSON_OUT="$TEST_TMPDIR/cut$k" ENGINE_DIST_TIMEOUT=$cut_timeout timeout 120 bash "$nodes" run "$NODES_ID" $k "$launch" \
    --nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port=29670 --job_token="$token" --node_rank=$k \
    "$recap" --epochs 30 --train-limit 12000 --test-limit 1000 --checkpoint "$TEST_TMPDIR/cut$k.safetensors" \
    >"$out.cut.$k" 2>&1 &
  pids[$k]=$!
done
for _ in $(seq 1 6000); do grep -q "epoch  1" "$out.cut.0" && break; sleep 0.01; done
grep -q "epoch  1" "$out.cut.0" || { cat "$out.cut.0" "$out.cut.1"; fail "the run across machines did not finish its first epoch"; }
bash "$nodes" link "$NODES_ID" 1 down
cut_at=$(date +%s.%N)
wait "${pids[0]}" && rc0=0 || rc0=$?
wait "${pids[1]}" && rc1=0 || rc1=$?
seconds=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.2f", e - s }')
cat "$out.cut.0" "$out.cut.1"
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] || fail "both machines should fail when the network between them is cut (exit $rc0, $rc1)"
awk -v s="$seconds" -v t=$cut_timeout 'BEGIN { exit !(s < t + 10) }' ||
  fail "the machines took $seconds s to stop after the cut (the timeout is $cut_timeout s)"
for k in 0 1; do
  other=$((1 - k))
  for r in $((k * 2)) $((k * 2 + 1)); do  # the machine's other rank too: it reports its leader's reason
    grep -qE "^\[rank $r\] .*waiting for rank $((other * 2)) on another machine" "$out.cut.$k" ||
      fail "rank $r should say whom machine $k waited for across the network"
  done
  grep -qE "waiting for rank $((other * 2)) on another machine \(10\.77\.$NODES_ID\.$((other + 1))\): .*, or the network between the machines is down" \
    "$out.cut.$k" || fail "machine $k should name rank $((other * 2)) on machine $other, its address and the network"
done
echo "ok: the network cut mid-run: both machines stopped $seconds s after it, naming the rank across it and its address"

# 8. A network blip shorter than the timeout: TCP resends what was lost, and the run goes on
# to the very weights of the uninterrupted run of section 5.
bash "$nodes" link "$NODES_ID" 1 up
blip_state="$TEST_TMPDIR/blip_state.safetensors"
for k in 1 0; do
  LESSON_OUT="$TEST_TMPDIR/blip$k" ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" $k "$launch" \
    --nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port=29680 --job_token="$token" --node_rank=$k \
    "$recap" "${resumable[@]}" --state "$blip_state" --checkpoint "$TEST_TMPDIR/blip$k.safetensors" >"$out.blip.$k" 2>&1 &
  pids[$k]=$!
done
for _ in $(seq 1 6000); do [[ -s "$blip_state" ]] && break; sleep 0.01; done
[[ -s "$blip_state" ]] || fail "the run for the blip saved no training state"
bash "$nodes" link "$NODES_ID" 1 down
[[ ! -e "$TEST_TMPDIR/blip0.safetensors" ]] || fail "the run had ended before the network went down"
sleep 2
bash "$nodes" link "$NODES_ID" 1 up
wait "${pids[0]}" && rc0=0 || rc0=$?
wait "${pids[1]}" && rc1=0 || rc1=$?
cat "$out.blip.0" "$out.blip.1"
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "a 2 s blip should not end the run (the timeout is 20 s): exit $rc0, $rc1"
"$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/blip0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
  fail "the run through the blip should end with the weights of the uninterrupted one, bit for bit"
echo "ok: a 2 s network blip mid-run: the run went on and ended bit-identical to the uninterrupted one"

# 9. ENGINE_SOCKET_IFNAME=lo on machine 0 only: its ranks listen on a loopback address the
# other machine cannot dial. Every rank says so at once, not after the timeout (20 s).
lo_job=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port=29690 --job_token="$token")
start=$(date +%s.%N)
ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 1 "$launch" "${lo_job[@]}" --node_rank=1 "$probe" \
  >"$out.lo.1" 2>&1 &
other=$!
ENGINE_SOCKET_IFNAME=lo ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" 0 "$launch" "${lo_job[@]}" \
  --node_rank=0 "$probe" >"$out.lo.0" 2>&1 && rc0=0 || rc0=$?
wait $other && rc1=0 || rc1=$?
seconds=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.2f", e - s }')
cat "$out.lo.0" "$out.lo.1"
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] || fail "a rank listening on lo cannot be reached from the other machine (exit $rc0, $rc1)"
awk -v s="$seconds" 'BEGIN { exit !(s < 10) }' || fail "the job took $seconds s to fail (the timeout is 20 s)"
for r in 0 1 2 3; do
  grep -qE "^\[rank $r\] .*rank 0 listens at 127\.0\.0\.1:[0-9]+, a loopback address, but runs on another machine .*set ENGINE_SOCKET_IFNAME on that machine to the interface the machines share \(not lo\)" \
    "$out.lo.$((r / 2))" || fail "rank $r should say that rank 0 listens on a loopback address"
done
echo "ok: ENGINE_SOCKET_IFNAME=lo on machine 0: every rank named the loopback address within $seconds s"

# 10. A machine lost whole (its launcher killed, as when the machine fails; its ranks go with
# it) and its launcher started afresh: the other machine's launcher restarts the job
# (restart 1), the new launcher starts at restart 0. Machine 1's ranks join the job's
# restart 1; machine 0's rank 0, whose store is still forming, takes up the restart that
# machine 1's ranks come with. Either way the recap resumes and ends with the very weights
# of the uninterrupted run of section 5.
lose_machine() {  # lose_machine K PORT [c10d]: static node ranks, or handed out at the endpoint
  local k=$1 port=$2 c10d=${3:-} other=$((1 - $1))
  local state="$TEST_TMPDIR/lost$k$c10d.state.safetensors" tag="lost$k$c10d"
  local job=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port="$port" --job_token="$token"
    --max_restarts=1)
  [[ -z "$c10d" ]] || job=(--nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint="$NODE0_ADDR:$port"
    --job_token="$token" --max_restarts=1)
  start_node() {  # start_node NODE SUFFIX: that machine's launcher, in the background
    local node_rank=(--node_rank="$1")
    [[ -z "$c10d" ]] || node_rank=()
    LESSON_OUT="$TEST_TMPDIR/$tag.$1$2" ENGINE_DIST_TIMEOUT=20 timeout 120 bash "$nodes" run "$NODES_ID" "$1" \
      "$launch" "${job[@]}" "${node_rank[@]}" "$recap" "${resumable[@]}" --state "$state" \
      --checkpoint "$TEST_TMPDIR/$tag.$1.safetensors" >"$out.$tag.$1$2" 2>&1 &
  }
  start_node 0 "" && pids[0]=$!
  [[ -z "$c10d" ]] || sleep 0.5  # machine 0 serves the endpoint and is node 0
  start_node 1 "" && pids[1]=$!
  for _ in $(seq 1 6000); do [[ -s "$state" ]] && break; sleep 0.01; done
  [[ -s "$state" ]] || fail "the run that loses machine $k saved no training state within 60 s"
  local victim=""  # machine k's launcher: the one in its network namespace
  for p in $(pgrep -x launch || true); do
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n$k" ]] &&
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE -- "[=:]$port " && victim=$p
  done
  [[ -n "$victim" ]] || fail "machine $k's launcher was not running when the first training state was saved"
  kill -9 "$victim"
  wait "${pids[$k]}" || true
  sleep 1  # the machine comes back
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
  echo "ok: machine $k lost and its launcher started afresh${c10d:+ (c10d)}: it joined the job's restart 1, which ended bit-identical"
}
lose_machine 1 29700
lose_machine 0 29710
lose_machine 1 29720 c10d  # its launcher takes node rank 1 back at the endpoint
lose_machine 0 29725 c10d  # the endpoint's machine: it serves a new one, which machine 1 meets

# 11. A machine that fails hard (power, a kernel panic) closes none of its connections. Under
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
  echo "SKIPPED (section 11): ss -K cannot destroy sockets on this kernel, so a hard failure cannot be emulated"
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

# 12. A machine that fails hard mid-run, under a long collective timeout (90 s): machine 0's
# ranks take machine 1's for lost when its TCP stops answering, ENGINE_LINK_TIMEOUT (4 s)
# after, not at the timeout. Emulated: machine 1 cut off, everything on it killed, and its
# sockets destroyed (ss -K), so that no FIN or reset ever leaves it. Returns 1 where ss -K
# cannot destroy sockets (TIME-WAIT: connections the earlier sections closed; they send nothing).
fail_hard() {
  bash "$nodes" link "$NODES_ID" 1 down
  cut_at=$(date +%s.%N)
  for p in $(pgrep -f "dist/launch|13_recap_main|multinode_probe" || true); do
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n1" ]] && kill -9 "$p"
  done
  wait "${pids[1]}" || true
  ip netns exec "en${NODES_ID}n1" ss -K dst "$NODE0_ADDR" >/dev/null 2>&1 || true
  ! ip netns exec "en${NODES_ID}n1" ss -tan | grep -v TIME-WAIT | grep -q " $NODE0_ADDR:"
}
lost_at_link_timeout() {  # lost_at_link_timeout LOG: machine 0's ranks named rank 2 and the link timeout
  for r in 0 1; do
    grep -qE "^\[rank $r\] .*rank 2 on another machine \(10\.77\.$NODES_ID\.2\) has not answered at the network level for 4 s \(ENGINE_LINK_TIMEOUT\): its machine is down" \
      "$1" || { cat "$1"; fail "rank $r should name rank 2, its machine's address and the link timeout"; }
  done
  awk -v s="$seconds" 'BEGIN { exit !(s < 30) }' || fail "machine 0 took $seconds s to take machine 1 for lost (link timeout 4 s)"
}
cannot_fail_hard() {  # cannot_fail_hard SECTION: says so, and stops machine 0's job
  echo "SKIPPED (section $1): ss -K cannot destroy sockets on this kernel, so a hard failure cannot be emulated"
  kill "${pids[0]}" 2>/dev/null || true
  wait "${pids[0]}" || true
}
linked=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --job_token="$token")

# 12a. Machine 0 waits to receive, all it sent acknowledged: keepalive finds the silence.
for k in 1 0; do
  ENGINE_DIST_TIMEOUT=90 ENGINE_LINK_TIMEOUT=4 timeout 200 bash "$nodes" run "$NODES_ID" $k "$launch" "${linked[@]}" \
    --master_port=29740 --node_rank=$k "$probe" --stall-rank 2 >"$out.stall.$k" 2>&1 &
  pids[$k]=$!
done
for _ in $(seq 1 3000); do grep -q "rank 2: stalling" "$out.stall.1" && break; sleep 0.02; done
grep -q "rank 2: stalling" "$out.stall.1" || { cat "$out.stall.0" "$out.stall.1"; fail "rank 2 never stalled"; }
sleep 1  # machine 0's part is sent and acknowledged
if fail_hard; then
  wait "${pids[0]}" && rc0=0 || rc0=$?
  seconds=$(awk -v s=$cut_at -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }')
  cat "$out.stall.0"
  [[ $rc0 -ne 0 ]] || fail "machine 0 should fail when machine 1 fails hard"
  lost_at_link_timeout "$out.stall.0"
  echo "ok: machine 1 failed hard while machine 0 waited to receive: taken for lost after $seconds s (link timeout 4 s, collective timeout 90 s)"
else
  cannot_fail_hard 12a
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

# 12b. The recap mid-step, machine 0's gradients unacknowledged: the link check finds the
# silence. The job restarts, machine 1 joins it when started again, and the recap ends with
# the weights of 5.
start_linked hard 29750 0 0 1
start_linked hard 29750 1 1 1
await_state hard
if fail_hard; then
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
  cannot_fail_hard 12b
fi
bash "$nodes" link "$NODES_ID" 1 up

# 12c. A spare machine (machine 2) replaces machine 1 at once, before machine 0 has noticed
# the loss: its ranks meet the group still running, their ranks held by machine 1's dead
# ones, and wait for the job's restart, which they join. Its launcher has --max_restarts=0:
# the wait costs no restart (before, its ranks failed at once, "two processes claim RANK=2").
start_linked spare 29760 0 0 1
start_linked spare 29760 1 1 1
await_state spare
if fail_hard; then
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
  cannot_fail_hard 12c
fi
bash "$nodes" link "$NODES_ID" 1 up

# The cut connections keep their namespaces alive for minutes after the ranks exit: taking
# the machines down must remove their links all the same.
bash "$nodes" down "$NODES_ID"
if ip -br link | grep -q "^en${NODES_ID}[hb]"; then fail "links of the machines outlived nodes.sh down: $(ip -br link | grep "^en${NODES_ID}")"; fi
echo "ok: nodes.sh down removed every link of the machines"
echo PASS
