// What this CPU can run, asked once: the loops compiled a second time for AVX2 or AVX-512
// (the GEMM's micro-kernels, elementwise ops, reductions, the optimizers' updates, the
// convolution's columns, batch norm, the shared-memory all-reduce) check it before taking
// their fast path; everything else runs on any x86-64.
//
// ENGINE_CPU_CAPABILITY caps what they may use, as PyTorch's ATEN_CPU_CAPABILITY does:
// `default` (the portable loops alone), `avx2` or `avx512` (the CPU's best, the default).
// A cap above the CPU's is the CPU's. It lets a machine with AVX-512 run, and its tests
// check, the loops a laptop without it runs.
//
//   if (engine::cpu_has_avx512()) loop_avx512(n, x); else loop(n, x);
//   ENGINE_CPU_CAPABILITY=default bazel-bin/tests/tensor/ops_test   # the portable loops
#pragma once

namespace engine {

// Ordered: each level includes those below it.
enum class CpuLevel { Portable = 0, Avx2 = 1, Avx512 = 2 };

// The level the dispatch uses: the CPU's, capped by ENGINE_CPU_CAPABILITY when it is set.
// Throws engine::Error naming the variable when it holds anything else than the three words.
CpuLevel cpu_level();
const char* cpu_level_name(CpuLevel level);  // "default", "avx2" or "avx512"

// AVX-512 Foundation (the 16-float vectors those loops use), within the cap.
bool cpu_has_avx512();
// AVX2 with FMA (the 8-float loops), within the cap.
bool cpu_has_avx2();

namespace detail {
// cpu_level()'s rule, for its tests: the CPU's level capped by the variable's value
// (nullptr: not set). Throws engine::Error for a value that is not a level's name.
CpuLevel capped_cpu_level(CpuLevel hardware, const char* value);
}  // namespace detail

}  // namespace engine
