// Internal to the bfloat16 GEMM: the AVX-512 BF16 micro-kernel, for CPUs that have
// avx512bf16 but no AMX (AMD Zen 4 and 5). Same packed panels and the same contract as
// amx_tile_32x32 (gemm_amx.h):
//   c[i*rsc + j] (+)= sum_{k < kc} a[i*kc + k] * b_pair(k, j)
// with `a` 32 rows of A, row-major, kc (a multiple of 32) values each, and `b` kc/2 rows of
// 32 column pairs ("VNNI" order).
#pragma once

#include <cstdint>

namespace engine::detail {

// True when the CPU has AVX512-BF16 (VDPBF16PS).
bool dpbf16_available();
void dpbf16_tile_32x32(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t rsc, bool accumulate);

}  // namespace engine::detail
