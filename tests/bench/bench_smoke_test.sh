#!/usr/bin/env bash
# Every benchmark program under bench/ runs to the end with small sizes and prints the JSON
# lines the drivers (bench/*.py) and docs/BENCHMARKS.md read; the drivers start. ddp_step runs with the step
# and round counts bench/ddp_nodes.py gives it, with every hook: its no_sync() rounds let
# the replicas part ways on purpose, which once stopped it at the first replica check that
# fell in them. Timings are printed, never compared.
set -euo pipefail
bench="$TEST_SRCDIR/ddp_engine/bench"
out="$TEST_TMPDIR/out.txt"

fail() {
  echo "FAIL: $*"
  exit 1
}

# run NAME KEY ARGS...: runs bench/NAME with ARGS; it must exit 0 and print at least one
# JSON line, every one of them whole, and one with KEY.
run() {
  local name=$1 key=$2
  shift 2
  echo "== $name $*"
  if ! "$bench/$name" "$@" >"$out" 2>&1; then
    cat "$out"
    fail "$name $* exited with an error"
  fi
  local json
  json=$(grep '^{' "$out" || true)
  [[ -n "$json" ]] || { cat "$out"; fail "$name $* printed no JSON line"; }
  while IFS= read -r line; do
    python3 -c 'import json, sys; json.loads(sys.argv[1])' "$line" || fail "$name $*: not JSON: $line"
  done <<<"$json"
  grep -q "\"$key\"" <<<"$json" || { cat "$out"; fail "$name $*: no line with \"$key\""; }
  echo "ok: $(grep -c '^{' "$out") JSON lines"
}

run gemm_bench ours_gflops --rounds 1
run gemm_bf16_bench bf16_gflops --rounds 1
run train_step samples_per_s --model mlp --batch 16 --steps 3 --rounds 1 --autocast both
run train_step fraction --model cnn --batch 4 --steps 2 --rounds 1 --gemm-reference
run allreduce_bench busbw_GBps --sizes 8 4096 262144 --rounds 1
run allreduce_bench busbw_GBps --in-place --world 3 --sizes 8 4096 262144 --rounds 1
run collectives_bench time_us --rounds 1 --sizes 4096 \
  --ops gather,scatter,reduce,all_to_all,broadcast,all_gather,reduce_scatter
run sharding_step total_bytes --steps 3 --rounds 1
for hook in none allreduce bf16 fp16 powersgd; do
  run ddp_step exposed_comm_ms --world 2 --batch 16 --steps 50 --rounds 3 --hook "$hook"
done
run ddp_step exposed_comm_ms --world 3 --batch 8 --steps 10 --rounds 2 --gradient-as-bucket-view
# The Python drivers parse, and those that need no PyTorch to start print their usage
# (the peer's own scripts import torch, which this test does not need).
for script in "$bench"/*.py; do
  python3 -c 'import ast, sys; ast.parse(open(sys.argv[1]).read(), sys.argv[1])' "$script" ||
    fail "$script does not parse"
done
for driver in allreduce allreduce_nodes collectives ddp_nodes ddp_step gpu_report hierarchical_nodes train_step; do
  python3 "$bench/$driver.py" --help >"$out" 2>&1 || { cat "$out"; fail "bench/$driver.py --help failed"; }
done
echo "ok: the Python drivers parse and start"
echo "every benchmark program ran"
