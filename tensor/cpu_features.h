// What this CPU can run, asked once: the loops compiled a second time for AVX-512
// (elementwise ops, reductions, the SGD update, the shared-memory all-reduce) check it
// before taking their fast path; everything else runs on any x86-64.
//
//   if (engine::cpu_has_avx512()) loop_avx512(n, x); else loop(n, x);
#pragma once

namespace engine {

// AVX-512 Foundation (the 16-float vectors those loops use).
bool cpu_has_avx512();

}  // namespace engine
