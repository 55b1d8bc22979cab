#!/usr/bin/env bash
# Builds every fuzz target in fuzz/ with clang's libFuzzer (plus ASan and UBSan) and runs
# each for a bounded time, starting from its corpus in fuzz/corpus/<target>/.
#
#   bash tools/setup.sh --fuzz          # clang and its fuzzing runtime, from Debian
#   bash tools/fuzz.sh                  # every target, 30 s each
#   bash tools/fuzz.sh 300 store wire   # these two, 5 minutes each
#
# New interesting inputs go to build/fuzz/found-<target>/ (not into the repo). A crash is
# written to build/fuzz/crash-<target>-*, the script stops with its name, and the fix
# comes with that file copied into fuzz/corpus/<target>/, where `bazel test
# //fuzz:<target>_replay` replays it from then on.
set -euo pipefail
cd "$(dirname "$0")/.."
seconds="${1:-30}"
shift || true
targets=("$@")
[[ ${#targets[@]} -gt 0 ]] || targets=(safetensors image idx launch_args store wire hello flags metadata notices)
CXX="${CXX:-clang++}"
command -v "$CXX" >/dev/null || { echo "fuzz.sh: $CXX not found: run 'bash tools/setup.sh --fuzz' first" >&2; exit 2; }

out=build/fuzz
mkdir -p "$out/obj"
flags=(-std=c++17 -O1 -g -I. -fno-omit-frame-pointer -fsanitize=address,undefined -fno-sanitize-recover=undefined)

# The engine, once, instrumented for coverage (fuzzer-no-link) and the sanitizers.
# Every source but the launcher's main and the nvcc-only files, so that new files are
# never missed.
sources=(tensor/*.cc tensor/cuda/*.cc autograd/*.cc nn/*.cc data/*.cc tools/flags/*.cc tools/stop_signals/*.cc
         lessons/fashion_mnist/trainer.cc)
for src in dist/*.cc; do [[ "$src" == dist/launch.cc ]] || sources+=("$src"); done
# An object is reused while it is newer than its source and every header that source
# included (listed in its .d file by -MMD): a changed header rebuilds what includes it.
up_to_date() {
  local obj=$1 f
  [[ -f "$obj" && -f "$obj.d" ]] || return 1
  for f in $(sed -e 's/^[^:]*://' -e 's/\\$//' "$obj.d"); do
    [[ "$obj" -nt "$f" ]] || return 1
  done
}
objects=()
for src in "${sources[@]}"; do
  obj="$out/obj/${src//\//_}.o"
  objects+=("$obj")
  up_to_date "$obj" && continue
  extra=()
  [[ "$src" == data/stb_impl.cc ]] && extra=(-w -fno-sanitize=nonnull-attribute)  # as data/BUILD says why
  echo "compiling $src"
  "$CXX" "${flags[@]}" -fsanitize=fuzzer-no-link "${extra[@]}" -MMD -MF "$obj.d" -c "$src" -o "$obj" &
  while [[ $(jobs -r | wc -l) -ge $(nproc) ]]; do wait -n; done
done
wait

status=0
for t in "${targets[@]}"; do
  echo "== $t: building"
  "$CXX" "${flags[@]}" -fsanitize=fuzzer "fuzz/${t}_fuzz.cc" "${objects[@]}" -lz -lpthread -lrt -o "$out/${t}_fuzz"
  mkdir -p "$out/found-$t"
  echo "== $t: fuzzing for $seconds s"
  if ! "$out/${t}_fuzz" -max_total_time="$seconds" -timeout=20 -rss_limit_mb=4096 -print_final_stats=1 \
      -artifact_prefix="$out/crash-$t-" "$out/found-$t" "fuzz/corpus/$t" 2>"$out/$t.log"; then
    echo "== $t: FOUND A CRASH; see $out/$t.log and $out/crash-$t-*"
    tail -30 "$out/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|stat::new_units_added|cov:" "$out/$t.log" | tail -3
  fi
done
exit $status
