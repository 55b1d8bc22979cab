#!/usr/bin/env bash
# Formatting and warnings as habits (CI runs this): every C++ and CUDA file matches
# .clang-format, and the whole tree builds with -Wextra -Werror (.bazelrc's config lint).
#
#   bash tools/setup.sh --lint && bash tools/lint.sh
#   clang-format -i path/to/file.cc     # to fix what it names
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "lint: clang-format is missing; run: bash tools/setup.sh --lint" >&2; exit 1; }
unformatted=()
while IFS= read -r f; do
  clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || unformatted+=("$f")
done < <(git ls-files '*.cc' '*.h' '*.cu' '*.cuh' | grep -v '^third_party/')
if (( ${#unformatted[@]} )); then
  echo "lint: ${#unformatted[@]} file(s) differ from .clang-format (fix with clang-format -i):" >&2
  printf '  %s\n' "${unformatted[@]}" >&2
  exit 1
fi
echo "lint: every C++ and CUDA file matches .clang-format"
for f in lessons/*/quick_check/unsolved.sha256; do
  (cd "${f%/*}" && sha256sum --status -c <(echo "$(cat unsolved.sha256)  exercise.cc")) ||
    { echo "lint: ${f%/*}/exercise.cc changed: write its sha256 into $f (the test that it fails as shipped reads it)" >&2; exit 1; }
done
echo "lint: every quick check's unsolved.sha256 matches its exercise.cc"
bazel build --config=lint //...
echo "lint: the tree builds with -Wextra -Werror"
