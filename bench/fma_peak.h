// The physical limit the GEMM figures are compared with: one core's float32 multiply-add
// peak, measured with 12 independent chains of 512-bit (AVX-512) or 256-bit (AVX2) fused
// multiply-adds, enough to cover the instruction's latency on the cores we run on, with no
// memory traffic at all. 0 where the CPU has neither. For the bfloat16 GEMM, the same loop
// of VDPBF16PS (0 without AVX512-BF16).
//
//   std::printf("FMA peak %.1f GFLOP/s\n", fma_peak_gflops());
//   std::printf("VDPBF16PS peak %.1f GFLOP/s\n", dpbf16_peak_gflops());
#pragma once

#include <immintrin.h>

#include <chrono>
#include <vector>

#include "bench/median.h"

namespace fma_peak_detail {

constexpr int kChains = 12;
constexpr long kSteps = 2'000'000;

// A value that depends on every chain, so the compiler keeps every one.
__attribute__((target("avx512f"))) inline float depends_on_all(const __m512 (&acc)[kChains]) {
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  return lanes[0] + lanes[15];
}

// kSteps x kChains FMAs of 16 (or 8) floats.
__attribute__((target("avx512f"))) inline float chains_avx512() {
  __m512 acc[kChains];
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + float(c));
  for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  }
  return depends_on_all(acc);
}

__attribute__((target("avx2,fma"))) inline float chains_avx2() {
  __m256 acc[kChains];
  const __m256 mul = _mm256_set1_ps(0.999999f), add = _mm256_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm256_set1_ps(1.0f + float(c));
  for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm256_fmadd_ps(acc[c], mul, add);
  }
  __m256 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm256_add_ps(total, acc[c]);
  float lanes[8];
  _mm256_storeu_ps(lanes, total);
  return lanes[0] + lanes[7];
}

// The same loop of AVX-512's bfloat16 dot product (VDPBF16PS: 16 lanes, each adding two
// products, so 4 flops a lane), the limit of the bfloat16 GEMM's AVX-512 BF16 kernel.
__attribute__((target("avx512f,avx512bf16"))) inline float chains_dpbf16() {
  __m512 acc[kChains];
  const __m512bh a = (__m512bh)_mm512_set1_epi16(0x3f80), b = (__m512bh)_mm512_set1_epi16(0x3380);  // 1, ~6e-8
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + float(c));
  for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_dpbf16_ps(acc[c], a, b);
  }
  return depends_on_all(acc);
}

// GFLOP/s of one loop doing `flops` in all, the median of 5 runs of ~10-20 ms each.
inline double median_rate(float (*chains)(), double flops) {
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + chains();
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(flops / s / 1e9);
  }
  return median(rates);
}

}  // namespace fma_peak_detail

// GFLOP/s (2 per lane per FMA).
inline double fma_peak_gflops() {
  using namespace fma_peak_detail;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
  const int lanes = avx512 ? 16 : 8;
  return median_rate(avx512 ? chains_avx512 : chains_avx2, 2.0 * lanes * kChains * double(kSteps));
}

// GFLOP/s of VDPBF16PS (4 per lane per instruction); 0 where the CPU lacks AVX512-BF16.
inline double dpbf16_peak_gflops() {
  using namespace fma_peak_detail;
  if (!__builtin_cpu_supports("avx512f") || !__builtin_cpu_supports("avx512bf16")) return 0;
  return median_rate(chains_dpbf16, 4.0 * 16 * kChains * double(kSteps));
}
