# What the tests on emulated machines share (multinode_test.sh, machine_loss_test.sh,
# link_window_test.sh, preemption_test.sh). Sourced with the number of machines to make, it skips (and passes)
# the test where namespaces cannot be made, saying why, and otherwise makes the machines
# (tools/nodes.sh), removes them when the test ends however it ends, and defines:
#   token          the job's secret, fresh for each test
#   out            a path prefix for the launchers' outputs
#   fail MESSAGE   says FAIL: MESSAGE, exits 1
#   run_job PORT OUT_PREFIX [ARGS]   one launcher per machine (0 and 1, 2 ranks each), the
#                  probe (or PROGRAM) with ARGS; returns when both end: rc0, rc1, seconds
#   resumable      the recap's flags for a short run that saves its training state
#   run_straight PORT   that run uninterrupted, its weights in $TEST_TMPDIR/straight.safetensors:
#                  what every restarted run must end with, bit for bit
#
#   source "$TEST_SRCDIR/ddp_engine/tests/dist/emulated_machines.sh" 2
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
eval "$(bash "$nodes" up "$1")"
trap 'bash "$nodes" down "$NODES_ID"' EXIT
trap 'exit 1' TERM INT  # a timeout or ^C still removes the machines
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
out="$TEST_TMPDIR/job"
fail() { echo "FAIL: $*"; exit 1; }

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

# The state lives where both machines read it (these machines share the file system; on
# real ones, a shared --state path).
resumable=(--epochs 2 --train-limit 12000 --test-limit 1000 --save-every 10)
run_straight() {
  LESSON_OUT="$TEST_TMPDIR/straight" PROGRAM="$recap" run_job "$1" "$out.straight" "${resumable[@]}" \
    --state "$TEST_TMPDIR/straight_state.safetensors" --checkpoint "$TEST_TMPDIR/straight.safetensors"
  [[ $rc0 -eq 0 && $rc1 -eq 0 ]] || { cat "$out.straight.0" "$out.straight.1"; fail "the uninterrupted recap failed"; }
}
