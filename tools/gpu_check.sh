#!/usr/bin/env bash
# The GPU check: every CUDA test, the NCCL tests, the main demo over nccl and the GPU
# benchmarks (beside PyTorch CUDA where it is installed), on a machine with an NVIDIA GPU and its driver but no Bazel.
#
# Here (with Bazel and the CUDA toolkit), gather the binaries and what they need:
#   bash tools/gpu_check.sh stage gpu_bundle        # builds, then fills gpu_bundle/
# There (copy the folder over), run everything and write the report:
#   bash gpu_bundle/gpu_check.sh run REPORT_DIR     # REPORT_DIR/report.md, summary.txt, tests.log,
#                                                   # demo.log, bench_*.jsonl
#
# cuBLAS and NCCL are not bundled (hundreds of MB): on the GPU machine they are taken from
# the library path, else from where a PyTorch installation bundles them (nvidia/*/lib in
# its site-packages). The run exits non-zero if any test fails or is skipped.
# Options (environment): GPU_CHECK_SANITIZER=1 also runs the CUDA tests under
# compute-sanitizer memcheck and racecheck (GPU_CHECK_SANITIZER_TIMEOUT seconds each, 240 by
# default); GPU_CHECK_TORCH_LIBS=1 takes cuBLAS and NCCL
# from PyTorch's bundle even when the library path has them (libraries.txt says which).
set -euo pipefail

TESTS=(tests/tensor/cuda_test tests/tensor/shared_library_test tests/tensor/cuda_ops_test tests/nn/cuda_nn_test tests/dist/nccl_test)
BENCH=bench/gpu_bench
DEMO=(dist/launch lessons/02_ddp_basics/13_recap_main)  # lesson 2's recap over nccl

stage() {
  local dest=$1
  cd "$(dirname "$0")/.."
  local targets=()
  for t in "${TESTS[@]}" "$BENCH" "${DEMO[@]}"; do targets+=("//${t%/*}:${t##*/}"); done
  bazel build "${targets[@]}"
  rm -rf "$dest" && mkdir -p "$dest/bin" "$dest/lib"
  for t in "${TESTS[@]}" "$BENCH" "${DEMO[@]}"; do
    cp -L "bazel-bin/$t" "$dest/bin/"
    # The engine's own shared libraries (Bazel links tests against them); not CUDA's.
    ldd "bazel-bin/$t" | awk '/=> .*_solib_/ {print $3}' | { grep -Ev "libcublas|libnccl|libcudart" || true; } |
      while read -r lib; do cp -Ln "$lib" "$dest/lib/" 2>/dev/null || true; done
  done
  cp bench/gpu_bench.py bench/gpu_report.py tools/gpu_check.sh "$dest/"
  # The libraries the engine will open there, named as this toolkit's headers version them.
  local inc=${CUDA_PATH:-/usr/local/cuda}/include
  echo "libcublas.so.$(awk '/#define CUBLAS_VER_MAJOR/ {print $3}' "$inc/cublas_api.h")" \
    "libnccl.so.$(awk '/#define NCCL_MAJOR/ {print $3}' "$inc/nccl.h")" >"$dest/cuda_libs.txt"
  mkdir -p "$dest/data" && cp "${FASHION_MNIST_DIR:-/usr/share/datasets/fashion-mnist}"/*.gz "$dest/data/"
  chmod -R u+w "$dest"
  du -sh "$dest"
}

# Where the dynamic loader would find a library by itself (LD_LIBRARY_PATH, then the ld.so
# cache): prints the path, or fails.
findable() {
  local name=$1 d
  for d in ${LD_LIBRARY_PATH:+${LD_LIBRARY_PATH//:/ }}; do [ -e "$d/$name" ] && { echo "$d/$name"; return 0; }; done
  ldconfig -p 2>/dev/null | awk -v n="$name" '$1 == n && !found {print $NF; found = 1} END {exit !found}'
}

# The libraries of cuda_libs.txt that the loader cannot find, space-separated.
missing_libs() {
  local lib
  for lib in $(cat "$1/cuda_libs.txt"); do findable "$lib" >/dev/null || echo -n " $lib"; done
}

# The engine opens cuBLAS and NCCL when a GPU first needs them (dlopen, not linked): adds
# the folders holding them to LD_LIBRARY_PATH when the loader cannot find them by itself.
find_cuda_libs() {
  local here=$1 missing
  missing=$(missing_libs "$here")
  if [ -z "$missing" ] && [ "${GPU_CHECK_TORCH_LIBS:-0}" != 1 ]; then return 0; fi
  echo "not on the library path (or GPU_CHECK_TORCH_LIBS=1):${missing:- none}; looking in PyTorch's bundled NVIDIA libraries"
  local py dirs
  for py in python3 /opt/torch/.venv/bin/python3; do
    dirs=$("$py" - <<'PY' 2>/dev/null || true
import glob, os, site, sys
roots = site.getsitepackages() + [site.getusersitepackages()] + sys.path
seen = set()
for r in roots:
    for d in glob.glob(os.path.join(r, "nvidia", "*", "lib")) + glob.glob(os.path.join(r, "nvidia", "cu*", "lib")):
        if d not in seen:
            seen.add(d)
            print(d)
PY
)
    [ -n "$dirs" ] && break
  done
  [ -n "$dirs" ] || { echo "could not find cuBLAS/NCCL: install them or PyTorch with CUDA"; return 1; }
  export LD_LIBRARY_PATH="$(echo "$dirs" | paste -sd:):${LD_LIBRARY_PATH:-}"
  missing=$(missing_libs "$here")
  [ -z "$missing" ] || { echo "still missing:$missing"; return 1; }
}

run() {
  local out=$1 here
  here=$(cd "$(dirname "$0")" && pwd)
  mkdir -p "$out"
  find_cuda_libs "$here"
  export LD_LIBRARY_PATH="$here/lib:${LD_LIBRARY_PATH:-}"
  for lib in $(cat "$here/cuda_libs.txt"); do echo "$lib => $(findable "$lib" || echo "not found")"; done |
    tee "$out/libraries.txt"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.sm,clocks.mem --format=csv | tee "$out/gpu.txt" || true
  local failed=0
  : >"$out/tests.log"
  for t in "${TESTS[@]}"; do
    local name=${t##*/} status=pass
    echo "== $name" | tee -a "$out/tests.log"
    if ! timeout 150 "$here/bin/$name" --durations yes >"$out/one.log" 2>&1; then status=FAIL; failed=1; fi
    if grep -q "SKIPPED" "$out/one.log"; then status="$status (SKIPPED seen)"; failed=1; fi
    cat "$out/one.log" >>"$out/tests.log" && rm "$out/one.log"
    tail -3 "$out/tests.log"
    echo "$name: $status" | tee -a "$out/summary.txt"
  done
  # The main demo, lesson 2's recap, on this GPU over nccl (one process: one GPU here).
  if LESSON_OUT=$(mktemp -d) FASHION_MNIST_DIR="$here/data" timeout 300 "$here/bin/launch" --nproc_per_node=1 \
      "$here/bin/13_recap_main" --backend nccl >"$out/demo.log" 2>&1 &&
      awk '/test accuracy/ {for (i = 1; i < NF; ++i) if ($i == "accuracy") a = $(i + 1)}
           END {exit !(a + 0 >= 88)}' "$out/demo.log"; then
    echo "demo (recap over nccl): pass, $(grep 'test accuracy' "$out/demo.log" | tail -1)" | tee -a "$out/summary.txt"
  else
    echo "demo (recap over nccl): FAIL" | tee -a "$out/summary.txt"; tail -5 "$out/demo.log"; failed=1
  fi
  timeout 300 "$here/bin/gpu_bench" | tee "$out/bench_engine.jsonl" || failed=1
  if python3 -c "import torch; assert torch.cuda.is_available()" 2>/dev/null; then
    timeout 300 python3 "$here/gpu_bench.py" | tee "$out/bench_pytorch.jsonl" || failed=1
  else
    echo "PyTorch with CUDA not found: engine figures only" | tee "$out/bench_pytorch.jsonl"
  fi
  python3 "$here/gpu_report.py" "$out" | tee "$out/report.md" || true
  # Optional, last (it is the slowest part, and the report above is written by then): the
  # CUDA tests again under compute-sanitizer (out-of-bounds accesses, races).
  local sanitizer
  sanitizer=$(command -v compute-sanitizer || ls /usr/local/cuda*/bin/compute-sanitizer 2>/dev/null | head -1 || true)
  if [ "${GPU_CHECK_SANITIZER:-0}" = 1 ] && [ -n "$sanitizer" ]; then
    for tool in memcheck racecheck; do
      for name in cuda_ops_test cuda_nn_test; do
        echo "== $tool $name" | tee -a "$out/tests.log"
        timeout "${GPU_CHECK_SANITIZER_TIMEOUT:-240}" "$sanitizer" --tool "$tool" --error-exitcode 9 "$here/bin/$name" >>"$out/tests.log" 2>&1 ||
          { echo "$tool $name: FAIL"; failed=1; }
        echo "$tool $name: $(grep -E 'ERROR SUMMARY|RACECHECK SUMMARY' "$out/tests.log" | tail -1)" | tee -a "$out/summary.txt"
      done
    done
  fi
  return $failed
}

case "${1:-}" in
  stage) stage "${2:?stage needs a destination folder}" ;;
  run) run "${2:?run needs a report folder}" ;;
  *) echo "usage: $0 stage DEST | run REPORT_DIR" >&2; exit 2 ;;
esac
