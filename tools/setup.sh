#!/usr/bin/env bash
# Installs what the engine needs to build and test, from Debian's archive only.
# Idempotent: when everything is already there it checks and returns in about a second.
#
#   bash tools/setup.sh          # build + test dependencies (OpenBLAS only for bench/)
#   bash tools/setup.sh --bench  # also OpenBLAS and PyTorch, the benchmark peers
#   bash tools/setup.sh --fuzz   # also clang and libFuzzer (tools/fuzz.sh)
#   bash tools/setup.sh --lint   # also clang-format (tools/lint.sh)
set -euo pipefail

packages=(bazel-bootstrap bazel-platforms catch2 libstb-dev nlohmann-json3-dev zlib1g-dev g++ libopenblas-dev dataset-fashion-mnist python3 procps
  iproute2 util-linux)  # ip, tc, unshare: emulated machines (tools/nodes.sh)
if [[ "${1:-}" == "--bench" ]]; then
  packages+=(libopenblas0-pthread python3-torch)
fi
if [[ "${1:-}" == "--lint" ]]; then
  packages+=(clang-format git)
fi
if [[ "${1:-}" == "--fuzz" ]]; then
  packages+=(clang libclang-rt-14-dev)
fi

missing=()
for p in "${packages[@]}"; do
  # dpkg-query is fast and needs no package lists; "install ok installed" means present.
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -gt 0 ]]; then
  echo "setup: installing ${missing[*]}" >&2
  SUDO=""
  if [[ $(id -u) -ne 0 ]]; then SUDO="sudo"; fi
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -qq
  $SUDO apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
  echo "setup: done" >&2
fi

# Optional: PyPI's safetensors + numpy for the python3 on PATH, so the checkpoint test can
# check that our files load elsewhere. Without them that test uses its own reader only.
if command -v python3 >/dev/null && ! python3 -c "import safetensors, numpy" 2>/dev/null; then
  python3 -m pip install -q --disable-pip-version-check safetensors numpy >/dev/null 2>&1 ||
    echo "setup: could not install safetensors/numpy from PyPI (optional; the checkpoint test falls back)" >&2
fi
