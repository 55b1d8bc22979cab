#!/usr/bin/env bash
# A machine taken back by its provider (a spot VM reclaimed, a node preempted): 2 emulated
# machines (tools/nodes.sh), 2 ranks each, one launcher per machine, the recap.
#   1. Machine 1's launcher alone is sent SIGTERM: every rank on both machines stops after
#      the same step (the question is a collective), rank 0 saves it, and both launchers
#      end with 143: machine 1's says it passed the signal on, machine 0's that its ranks
#      stopped on request. The same two commands with --resume end bit-identical to a run
#      never stopped.
#   2. The scheduler's warning (SIGUSR1, as Slurm's --signal=USR1@90 sends it) to machine 0's
#      launcher: passed on as SIGUSR1, and the job stops saved in the same way.
# Skips (and passes) where namespaces cannot be made, saying why.
source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 2
run_straight 29800

# preempt PORT MACHINE SIGNAL: the job in the background, MACHINE's launcher sent SIGNAL
# just after the first saved state; then both resumed. Sets tag.
preempt() {
  local port=$1 k=$2 sig=$3 victim=""
  tag="preempt$k$sig"
  local state="$TEST_TMPDIR/$tag.state.safetensors"
  local job=(--nnodes=2 --nproc_per_node=2 --master_addr="$NODE0_ADDR" --master_port="$port" --job_token="$token")
  start_node() {  # start_node NODE SUFFIX [ARGS]: that machine's launcher, in the background
    local node=$1 suffix=$2
    shift 2
    LESSON_OUT="$TEST_TMPDIR/$tag.$node$suffix" ENGINE_DIST_TIMEOUT=20 timeout 120 \
      bash "$nodes" run "$NODES_ID" "$node" "$launch" "${job[@]}" --node_rank="$node" "$recap" "${resumable[@]}" \
      --state "$state" --checkpoint "$TEST_TMPDIR/$tag.$node.safetensors" "$@" >"$out.$tag.$node$suffix" 2>&1 &
  }
  start_node 0 "" && pids[0]=$!
  start_node 1 "" && pids[1]=$!
  for _ in $(seq 1 6000); do [[ -s "$state" ]] && break; sleep 0.01; done
  [[ -s "$state" ]] || fail "the job saved no training state within 60 s"
  for p in $(pgrep -x launch || true); do  # machine k's launcher: the one in its network namespace
    [[ "$(ip netns identify "$p" 2>/dev/null)" == "en${NODES_ID}n$k" ]] &&
      tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -qE -- "=$port " && victim=$p
  done
  [[ -n "$victim" ]] || fail "machine $k's launcher was not running when the first training state was saved"
  kill -"$sig" "$victim"
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
  cat "$out.$tag.0" "$out.$tag.1"
  local other=$((1 - k)) sent=143
  [[ $sig == USR1 ]] && sent=138
  local rcs=("$rc0" "$rc1")
  [[ ${rcs[$k]} -eq $sent && ${rcs[$other]} -eq 143 ]] ||
    fail "machine $k's launcher should exit $sent and machine $other's 143 (exit $rc0, $rc1)"
  grep -qE "^\[rank 0\] asked to stop by (SIG$sig|a signal to another rank): stopped after step [0-9]+ \(epoch [12], batch [0-9]+ of [0-9]+\)" \
    "$out.$tag.0" || fail "rank 0 should say where the job stopped, saved"
  grep -q "^launch: the launcher got signal .* and passed it on to the ranks: every rank stopped on request (status 143)$" \
    "$out.$tag.$k" || fail "machine $k's launcher should say that it passed the signal on and its ranks stopped on request"
  grep -qE "^launch: rank [0-9] \(pid [0-9]+\) exited with status 143 \(128 \+ SIGTERM: it stopped on request\); the other ranks were stopped$" \
    "$out.$tag.$other" || fail "machine $other's launcher should say that its rank stopped on request"
  start_node 0 ".resumed" --resume && pids[0]=$!
  start_node 1 ".resumed" --resume && pids[1]=$!
  wait "${pids[0]}" && rc0=0 || rc0=$?
  wait "${pids[1]}" && rc1=0 || rc1=$?
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { cat "$out.$tag.0.resumed" "$out.$tag.1.resumed"; fail "the resumed job failed (exit $rc0, $rc1)"; }
  grep -qE "^\[rank 0\] resumed from .*$tag.state.safetensors: epoch [12], after batch [0-9]+ \(step [0-9]+\)$" "$out.$tag.0.resumed" ||
    fail "the recap should resume from the step it stopped at: $(grep resumed "$out.$tag.0.resumed")"
  "$root/tests/dist/checkpoint_diff" "$TEST_TMPDIR/$tag.0.safetensors" "$TEST_TMPDIR/straight.safetensors" 0 ||
    fail "stopped and resumed, the job should end with the weights of the uninterrupted one, bit for bit"
}

preempt 29810 1 TERM
echo "ok: machine 1's launcher sent SIGTERM: every rank on both machines stopped after the same step, saved; resumed, bit-identical"
preempt 29820 0 USR1
echo "ok: machine 0's launcher sent SIGUSR1 (a scheduler's warning): passed on, the job stopped saved; resumed, bit-identical"
