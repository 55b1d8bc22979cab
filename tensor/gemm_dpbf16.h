// Internal to the bfloat16 GEMM: the AVX-512 BF16 micro-kernel, for CPUs that have
// avx512bf16, no AMX, and a fast VDPBF16PS (AMD Zen 4 and 5). Same packed panels and the
// same contract as amx_tile_32x32 (gemm_amx.h):
//   c[i*rsc + j] (+)= sum_{k < kc} a[i*kc + k] * b_pair(k, j)
// with `a` 32 rows of A, row-major, kc (a multiple of 32) values each, and `b` kc/2 rows of
// 32 column pairs ("VNNI" order).
#pragma once

#include <cstdint>

namespace engine::detail {

// True when the CPU has AVX512-BF16 (VDPBF16PS).
bool dpbf16_available();
// True where VDPBF16PS also does more multiply-adds per second than float32 FMAs, so that
// the kernel is worth picking: AMD's cores (Zen 5: 468 GFLOP/s against 256, one core).
// Intel's run it at half the FMA rate (family 6 model 207, with AMX hidden by its VM: 87
// against 175), and there the operands are better widened to float32.
bool dpbf16_outruns_fma();
void dpbf16_tile_32x32(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t rsc, bool accumulate);

}  // namespace engine::detail
