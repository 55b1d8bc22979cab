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
#   9. ENGINE_SOCKET_IFNAME=lo on machine 0: every rank names the loopback address at once;
#  10. machine 0 named by its host name, which its own /etc/hosts maps to 127.0.1.1 (as
#      Debian and Ubuntu do) and machine 1's to its address: the job runs, both with
#      --master_addr and with c10d's --rdzv_endpoint, machine 0's ranks at its address; and
#      when machine 1 can resolve the name only 2 s after its ranks start, they wait for it;
#      and machine 0 given 0.0.0.0 (every interface) while machine 1 is given its address;
#  11. a master address where nothing answers is said to be silent before the timeout;
#  12. init_method file:// on a file system both machines share, no MASTER_ADDR (as with
#      PyTorch's FileStore): rank 0 lists its machine's addresses in the file, the other
#      machine's ranks dial them, skipping an address both machines have (as Docker's).
#  13. a rank on machine 1 that exits 0 before init_process_group: machine 0's ranks, which
#      its launcher cannot see, are told through rank 0's store and fail within seconds.
# Whole machines lost, and failing hard: machine_loss_test.sh.
# Skips (and passes) where namespaces cannot be made, saying why.
source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 2

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

# 5. Restarted on both machines, resumed exactly.
run_straight 29640
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

# 10. --master_addr (or --rdzv_endpoint) given as machine 0's host name. Each machine reads
# its own /etc/hosts: machine 0 maps its name to 127.0.1.1, as Debian's installer writes,
# machine 1 maps it to machine 0's address. Rank 0's store, and the launcher's endpoint,
# listen on every interface, and machine 0's ranks listen at the address that reaches
# machine 1, not at the loopback address that reaches the store.
name0="node$NODES_ID-0"
printf '127.0.0.1 localhost\n127.0.1.1 %s\n' "$name0" >"$TEST_TMPDIR/hosts.0"
printf '127.0.0.1 localhost\n%s %s\n' "$NODE0_ADDR" "$name0" >"$TEST_TMPDIR/hosts.1"
# "late": machine 1's resolver learns the name only 2 s after its ranks start (a cluster's
# DNS publishes a machine's name once it is up): they look it up again until it resolves.
# "any": machine 0 given --master_addr=0.0.0.0 (every interface), machine 1 its address.
for form in static c10d late any; do
  case $form in
    static) where=(--master_addr="$name0" --master_port=29700) ;;
    c10d) where=(--rdzv_backend=c10d --rdzv_endpoint="$name0:29710") ;;
    late) where=(--master_addr="$name0" --master_port=29720)
      printf '127.0.0.1 localhost\n' >"$TEST_TMPDIR/hosts.1" ;;
    any) where=(--master_port=29740) ;;
  esac
  for k in 1 0; do
    rank_flag=(); [[ $form != c10d ]] && rank_flag=(--node_rank=$k)
    [[ $form == any && $k == 0 ]] && rank_flag+=(--master_addr=0.0.0.0)
    [[ $form == any && $k == 1 ]] && rank_flag+=(--master_addr="$NODE0_ADDR")
    on_k=(bash "$nodes" run "$NODES_ID" $k sh -c 'mount --bind "$0" /etc/hosts && exec "$@"' "$TEST_TMPDIR/hosts.$k")
    ENGINE_DIST_TIMEOUT=20 timeout 120 "${on_k[@]}" "$launch" --nnodes=2 --nproc_per_node=2 "${where[@]}" \
      --job_token="$token" "${rank_flag[@]}" "$probe" >"$out.name.$form.$k" 2>&1 &
    pids[$k]=$!
  done
  if [[ $form == late ]]; then  # written in place: the file mounted over machine 1's /etc/hosts
    sleep 2
    printf '127.0.0.1 localhost\n%s %s\n' "$NODE0_ADDR" "$name0" >"$TEST_TMPDIR/hosts.1"
  fi
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
  cat "$out.name.$form.0" "$out.name.$form.1"
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "$form: machine 0 named by a host name it maps to 127.0.1.1: the job failed (exit $rc0, $rc1)"
  for r in 0 1; do
    grep -qE "^\[rank $r\] rank $r on $name0 at 10\.77\.$NODES_ID\.1:[0-9]+: all_reduce runs hierarchical" "$out.name.$form.0" ||
      fail "$form: rank $r should listen at machine 0's address, 10.77.$NODES_ID.1"
  done
  said="\"$name0\" is a loopback address on this machine"
  [[ $form == any ]] && said="rank 0's store listens on every interface of this machine (0\.0\.0\.0)"
  grep -q "^\[rank 0\] \[init_process_group\] $said.*its ranks listen at 10\.77\.$NODES_ID\.1, the address that reaches rank 2's machine" \
    "$out.name.$form.0" || fail "$form: rank 0 should say which address its machine's ranks listen at, and why"
  grep -q "^\[rank 3\] rank 3: every collective equals its closed form" "$out.name.$form.1" || fail "$form: rank 3: collectives"
done
for r in 2 3; do
  grep -q "^\[rank $r\] \[dist\] cannot resolve \"$name0\", the host of the rendezvous store (rank 0): .*; looking it up again until the timeout" \
    "$out.name.late.1" || fail "late: rank $r should say at once that it cannot resolve $name0 yet"
done
echo "ok: machine 0 named by its host name, 127.0.1.1 in its own /etc/hosts: the job ran (--master_addr and c10d)"
echo "ok: machine 0's name resolved on machine 1 only 2 s after its ranks started: they looked it up again, and the job ran"
echo "ok: machine 0 given --master_addr=0.0.0.0, machine 1 its address: the job ran"

# 11. A master address where nothing answers at all (a machine that is down, or a firewall
# that drops the port; here an address on machine 1's network that no machine has): said a
# third of the way into the wait, then named at the timeout. No other run said it.
bash "$nodes" run "$NODES_ID" 1 ip neigh add "10.77.$NODES_ID.9" lladdr 02:00:00:00:00:09 dev eth0 nud permanent
ENGINE_DIST_TIMEOUT=3 timeout 60 bash "$nodes" run "$NODES_ID" 1 env MASTER_ADDR="10.77.$NODES_ID.9" MASTER_PORT=29730 \
  RANK=1 WORLD_SIZE=2 "$probe" >"$out.silent" 2>&1 && rc1=0 || rc1=$?
cat "$out.silent"
[[ $rc1 -ne 0 ]] || fail "a rank whose master never answers should fail"
grep -q "^\[dist\] the rendezvous store (rank 0) at 10\.77\.$NODES_ID\.9:29730 has not answered a connection for 1 s: its machine is down or unreachable, or a firewall drops port 29730" \
  "$out.silent" || fail "the rank should say, before the timeout, that nothing answers at the master's address"
grep -q "could not connect to the rendezvous store (rank 0) at 10\.77\.$NODES_ID\.9:29730 before the timeout (last error: Connection timed out); nothing answered" \
  "$out.silent" || fail "the rank should say at the timeout that nothing answered"
if grep -l "has not answered a connection" "$out".[0-9a-z]* 2>/dev/null | grep -v "silent$"; then
  fail "a run whose machines answered said they did not"
fi
echo "ok: a master address where nothing answers: said after 1 s of a 3 s wait, named at the timeout"

# 12. file:// across machines. Rank 0 writes where it listens into a file on a file system
# both machines share; with no MASTER_ADDR, rank 0's own 127.0.0.1 would leave the other
# machine's ranks dialing themselves until the timeout. Both machines also have one more
# address, the same on both (Docker gives every machine 172.17.0.1), and listed first (here
# on lo): machine 1 must not dial its own.
for k in 0 1; do bash "$nodes" run "$NODES_ID" $k ip addr add 172.17.0.1/32 dev lo; done
rendezvous="$TEST_TMPDIR/rendezvous"
rm -f "$rendezvous"
# One `nodes.sh run` a machine: each run has its own /dev/shm, so its ranks share memory.
both_ranks='a=$1 b=$2; shift 2; RANK=$a "$0" "$@" >"$out.file.$a" 2>&1 & p=$!
  RANK=$b "$0" "$@" >"$out.file.$b" 2>&1; s=$?; wait $p && exit $s'
start=$(date +%s.%N)
for k in 0 1; do
  ENGINE_DIST_TIMEOUT=20 ENGINE_JOB_TOKEN="$token" WORLD_SIZE=4 out="$out" timeout 60 bash "$nodes" run "$NODES_ID" $k \
    env -u MASTER_ADDR -u MASTER_PORT sh -c "$both_ranks" "$probe" $((2 * k)) $((2 * k + 1)) \
    --init-method "file://$rendezvous" &
  pids[$k]=$!
done
wait "${pids[0]}" && rc0=0 || rc0=$?
wait "${pids[1]}" && rc1=0 || rc1=$?
seconds=$(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.2f", e - s }')
cat "$out.file".[0-3]
[[ $rc0 -eq 0 && $rc1 -eq 0 ]] || fail "file:// across machines: the job failed (machine 0: exit $rc0, machine 1: exit $rc1)"
for r in 0 1 2 3; do
  node=$((r / 2))
  grep -qE "^rank $r on node$NODES_ID-$node at 10\.77\.$NODES_ID\.$((node + 1)):[0-9]+: all_reduce runs hierarchical over 2 machines" \
    "$out.file.$r" || fail "file://: rank $r should run on machine $node at its address, hierarchical"
  grep -q "^rank $r: DDP vs one process on the global batch" "$out.file.$r" || fail "file://: rank $r: DDP"
done
if grep -q "refused connections\|172\.17\.0\.1" "$out.file".[0-3]; then
  fail "file://: a rank dialed an address that is not rank 0's (its own 0.0.0.0 or 172.17.0.1)"
fi
[[ ! -e "$rendezvous" ]] || fail "file://: rank 0 should remove the rendezvous file when the group is destroyed"
awk -v s="$seconds" 'BEGIN { exit !(s < 15) }' || fail "file://: the job took $seconds s (the timeout is 20 s)"
echo "ok: file:// on a shared file system, no MASTER_ADDR: the machines found each other in $seconds s, the address both have skipped"

# 13. Rank 3 (machine 1) returns before init_process_group. Machine 1's launcher sees it and
# its rank 2 waiting; machine 0's ranks wait too, out of its sight: it leaves the reason in
# rank 0's store, where they read it. Without that they waited out the timeout (20 s here).
run_job 29700 "$out.leave" --leave-rank 3
cat "$out.leave.0" "$out.leave.1"
[[ $rc0 -ne 0 && $rc1 -ne 0 ]] || fail "a rank that never joins should fail the job on both machines (exit $rc0, $rc1)"
grep -q "^\[rank 3\] rank 3: leaving before init_process_group" "$out.leave.1" || fail "rank 3 should leave"
# Machine 0's first rank to read it fails; its launcher then stops the other (rank 0 waits
# up to 5 s for every rank to read the reason, and may be stopped before it prints it).
grep -qE "^\[rank [01]\] .*\[launch on node$NODES_ID-1\] rank 3 \(pid [0-9]+\) exited with status 0 without joining the group \(it never called init_process_group\): the group cannot form without it" \
  "$out.leave.0" || fail "a rank on machine 0 should be told that rank 3 left without joining"
grep -qE "^launch: rank 3 \(pid [0-9]+\) exited with status 0 without joining the group \(it never called init_process_group\); the ranks waiting for it were told so through rank 0's store; the other ranks were stopped" \
  "$out.leave.1" || fail "machine 1's launcher should name rank 3"
awk -v s="$seconds" 'BEGIN { exit !(s < 15) }' || fail "the job took $seconds s to fail (the timeout is 20 s)"
echo "ok: rank 3 left machine 1 before joining: machine 0's ranks were told within $seconds s"

# The cut connections keep their namespaces alive for minutes after the ranks exit: taking
# the machines down must remove their links all the same.
bash "$nodes" down "$NODES_ID"
if ip -br link | grep -q "^en${NODES_ID}[hb]"; then fail "links of the machines outlived nodes.sh down: $(ip -br link | grep "^en${NODES_ID}")"; fi
echo "ok: nodes.sh down removed every link of the machines"
echo PASS

