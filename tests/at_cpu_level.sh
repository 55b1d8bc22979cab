#!/usr/bin/env bash
# Runs test binaries again with ENGINE_CPU_CAPABILITY=LEVEL: the loops a CPU without AVX-512
# (or without AVX2) runs, checked on this one. The first binary must be
# tests/tensor/cpu_features_test, which says the level the dispatch ran at.
#   at_cpu_level.sh LEVEL path/to/cpu_features_test path/to/test...
set -uo pipefail
level=$1
shift
export ENGINE_CPU_CAPABILITY=$level
status=0
first=1
for test in "$@"; do
  out=$("./$test" 2>&1)
  rc=$?
  if [[ $first -eq 1 && "$out" != *"ENGINE_CPU_CAPABILITY=$level: the dispatch runs at "* ]]; then
    echo "FAIL: $test did not run its loops at $level:"
    echo "$out" | tail -5
    status=1
  fi
  first=0
  if [[ $rc -ne 0 ]]; then
    echo "FAIL: $test at ENGINE_CPU_CAPABILITY=$level (exit $rc):"
    echo "$out" | tail -40
    status=1
  else
    echo "ok: $test at ENGINE_CPU_CAPABILITY=$level: $(echo "$out" | tail -1)"
  fi
done
exit $status
