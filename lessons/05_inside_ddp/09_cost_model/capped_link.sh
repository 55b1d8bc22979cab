#!/usr/bin/env bash
# Step 9 once more, between two emulated machines (tools/nodes.sh) whose link is capped at
# 1 Gbit/s: one rank on each, so the ring runs over that link, and the fitted beta must be
# the link's: 1 / (0.125 GB/s) = 8 ns per byte. Skips, saying why, where machines cannot
# be emulated.
#   bazel run //lessons/05_inside_ddp:09_cost_model_capped_link     (or its test)
set -euo pipefail
root="${TEST_SRCDIR:-${RUNFILES_DIR:-$0.runfiles}}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
program="$root/lessons/05_inside_ddp/09_cost_model_main"
nodes="$root/tools/nodes.sh"
if ! why=$(bash "$nodes" check 2>&1); then
  echo "SKIPPED: cannot emulate machines here: $why"
  exit 0
fi
eval "$(bash "$nodes" up 2 1gbit)"
trap 'bash "$nodes" down "$NODES_ID"' EXIT
trap 'exit 1' TERM INT
echo "two emulated machines at $NODE0_ADDR and $NODE1_ADDR, their link capped at 1 Gbit/s (tc tbf)"
export LESSON_RESULTS="${TEST_TMPDIR:-/tmp}/capped_results.jsonl" ENGINE_SOCKET_IFNAME=eth0
export LESSON_OUT="${TEST_TMPDIR:-$PWD/out/05_inside_ddp/capped_link}"
rm -f "$LESSON_RESULTS"
token=$(head -c 16 /dev/urandom | od -An -tx1 | tr -d ' \n')
common=(--nnodes=2 --nproc_per_node=1 --master_addr="$NODE0_ADDR" --master_port=29500 --job_token="$token")
bash "$nodes" run "$NODES_ID" 1 "$root/dist/launch" "${common[@]}" --node_rank=1 "$program" >/dev/null &
bash "$nodes" run "$NODES_ID" 0 "$root/dist/launch" "${common[@]}" --node_rank=0 "$program"
wait
source "$root/lessons/common/checks.sh"
OUTPUT=/dev/null
[[ $(result algorithm) == ring ]] || fail "the ring should run between the machines: $(result algorithm)"
beta=$(result beta)
holds "b > 0.8 * 8e-9 && b < 1.25 * 8e-9" "beta is the link's 8 ns per byte (1 Gbit/s), within 25%" b="$beta"
echo "fitted on the capped link: $(awk -v b="$beta" 'BEGIN { printf "%.3f GB/s (the link: 0.125)", 1e-9 / b }')"
