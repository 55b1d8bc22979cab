// The AVX-512 BF16 micro-kernel (gemm_dpbf16.h). VDPBF16PS multiplies 16 pairs of
// bfloat16 values and adds both products of each pair into one float32 lane: twice the
// multiply-adds of a float32 FMA per instruction, at the same rate on cores that run it at
// full width (Zen 5: 468 GFLOP/s against 256 for float32 FMAs, measured on one core).
//
// The 32 x 32 block is made as four 8 x 32 tiles, each held in 16 zmm accumulators as the
// float32 kernel holds its tile: per pair of k, two vectors of B's pairs (32 columns) and,
// per row, A's pair broadcast as one 32-bit word, feed 16 VDPBF16PS. Like AMX, the
// instruction reads subnormal inputs as zero and flushes subnormal results.
#include "tensor/gemm_dpbf16.h"

#include <immintrin.h>

#include <cstring>

#include "tensor/cpu_features.h"

namespace engine::detail {

bool dpbf16_available() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

// Decided by the vendor, not by timing the instruction: a choice made by a stopwatch could
// differ between two runs on one machine, and with it the rounding of every product.
bool dpbf16_outruns_fma() {
  static const bool ok = dpbf16_available() && __builtin_cpu_is("amd");
  return ok;
}

namespace {

constexpr int kRows = 8, kBlock = 32;

__attribute__((target("avx512f,avx512bf16"))) inline void tile_8x32(int64_t kc, const uint16_t* a, const uint16_t* b,
                                                                    float* c, int64_t rsc, bool accumulate) {
  __m512 acc[kRows][2];
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    acc[i][0] = accumulate ? _mm512_loadu_ps(c + i * rsc) : _mm512_setzero_ps();
    acc[i][1] = accumulate ? _mm512_loadu_ps(c + i * rsc + 16) : _mm512_setzero_ps();
  }
  for (int64_t p = 0; p < kc / 2; ++p) {
    const __m512bh b0 = (__m512bh)_mm512_loadu_si512(b + p * 2 * kBlock),
                   b1 = (__m512bh)_mm512_loadu_si512(b + p * 2 * kBlock + kBlock);
#pragma GCC unroll 8
    for (int i = 0; i < kRows; ++i) {
      int32_t pair;  // A's values at k = 2p and 2p + 1, side by side
      std::memcpy(&pair, a + i * kc + 2 * p, 4);
      const __m512bh av = (__m512bh)_mm512_set1_epi32(pair);
      acc[i][0] = _mm512_dpbf16_ps(acc[i][0], av, b0);
      acc[i][1] = _mm512_dpbf16_ps(acc[i][1], av, b1);
    }
  }
#pragma GCC unroll 8
  for (int i = 0; i < kRows; ++i) {
    _mm512_storeu_ps(c + i * rsc, acc[i][0]);
    _mm512_storeu_ps(c + i * rsc + 16, acc[i][1]);
  }
}

}  // namespace

__attribute__((target("avx512f,avx512bf16"))) void dpbf16_tile_32x32(int64_t kc, const uint16_t* a, const uint16_t* b,
                                                                     float* c, int64_t rsc, bool accumulate) {
  for (int r = 0; r < kBlock; r += kRows) tile_8x32(kc, a + r * kc, b, c + r * rsc, rsc, accumulate);
}

}  // namespace engine::detail
