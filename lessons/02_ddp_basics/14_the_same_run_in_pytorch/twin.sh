#!/usr/bin/env bash
# Lesson 2, step 14: the recap and its PyTorch twin, from the same weights on the same
# batches, then the two side by side, beside PyTorch against itself (its kernels held to AVX2).
#   twin.sh path/to/compare_runs            the demo: the MLP on 2 ranks, 2 epochs of 60,000 images
#   twin.sh path/to/compare_runs --test     MLP and CNN, on 1 and 2 ranks, on slices (the test)
set -euo pipefail
root="${RUNFILES_DIR:-$0.runfiles}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="${TEST_SRCDIR:-$PWD}/ddp_engine"
[[ -x "$root/dist/launch" ]] || root="$PWD"
compare="$root/$1"
recap="$root/lessons/02_ddp_basics/13_recap_main"
twin="$root/lessons/common/torch_twin.py"
out="${LESSON_OUT:-${BUILD_WORKSPACE_DIRECTORY:-.}/out/02_same_run_in_pytorch}"
if ! /usr/bin/python3 -c "import torch" 2>/dev/null; then
  echo "SKIPPED: PyTorch is not installed (bash tools/setup.sh --bench installs it): nothing to compare with"
  exit 0
fi
configs=("mlp 2 --epochs 2 --lr 0.05")
[[ "${2:-}" == "--test" ]] && configs=("mlp 1 --epochs 1 --train-limit 12800 --lr 0.05"
                                        "mlp 2 --epochs 1 --train-limit 25600 --lr 0.05"
                                        "cnn 1 --epochs 1 --train-limit 6400 --lr 0.02"
                                        "cnn 2 --epochs 1 --train-limit 12800 --lr 0.02")
for config in "${configs[@]}"; do
  read -r model world args <<<"$config"
  dir="$out/$model-x$world"
  rm -rf "$dir" && mkdir -p "$dir"
  echo "== $model, $world rank(s): 13_recap --model $model $args"
  start=$(date +%s.%N)
  LESSON_OUT="$dir/recap" "$root/dist/launch" --nproc_per_node="$world" "$recap" --model "$model" $args \
    --test-limit 1000 --twin "$dir/engine" >"$dir/engine.log" 2>&1 || { cat "$dir/engine.log"; exit 1; }
  echo "engine: $(awk -v s=$start -v e=$(date +%s.%N) 'BEGIN { printf "%.1f", e - s }') s in all"
  # PyTorch with the kernels it picks for this CPU (a shell's OPENBLAS_CORETYPE would hold
  # OpenBLAS to another one).
  env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE /usr/bin/python3 "$twin" "$dir/engine" "$dir/pytorch" | sed 's/^/  /'
  # The yardstick: PyTorch once more, its kernels held to AVX2 as on a CPU without AVX-512 (its
  # own, oneDNN's convolutions, OpenBLAS's GEMMs): the same maths, only its sums in another order.
  env -u OPENBLAS_L2_SIZE ATEN_CPU_CAPABILITY=avx2 ONEDNN_MAX_CPU_ISA=AVX2 OPENBLAS_CORETYPE=Haswell \
    /usr/bin/python3 "$twin" "$dir/engine" "$dir/pytorch-avx2" --baseline "$dir/pytorch" | grep "^PyTorch in" | sed 's/^/  /'
  "$compare" "$dir/engine" "$dir/pytorch" "$dir/twin.png" "Fashion-MNIST $model, $world rank(s)" \
    --pytorch-again "$dir/pytorch-avx2"
done
