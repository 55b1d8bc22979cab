// The physical limit the GEMM figures are compared with: one core's float32 multiply-add
// peak, measured with 12 independent chains of 512-bit (AVX-512) or 256-bit (AVX2) fused
// multiply-adds, enough to cover the instruction's latency on the cores we run on, with no
// memory traffic at all. 0 where the CPU has neither.
//
//   std::printf("FMA peak %.1f GFLOP/s\n", fma_peak_gflops());
#pragma once

#include <immintrin.h>

#include <chrono>
#include <vector>

#include "bench/median.h"

namespace fma_peak_detail {

constexpr int kChains = 12;
constexpr long kSteps = 2'000'000;

// kSteps x kChains FMAs of 16 (or 8) floats; returns a value that depends on all of them,
// so the compiler keeps every one.
__attribute__((target("avx512f"))) inline float chains_avx512() {
  __m512 acc[kChains];
  const __m512 mul = _mm512_set1_ps(0.999999f), add = _mm512_set1_ps(1e-7f);
#pragma GCC unroll 12
  for (int c = 0; c < kChains; ++c) acc[c] = _mm512_set1_ps(1.0f + float(c));
  for (long s = 0; s < kSteps; ++s) {
#pragma GCC unroll 12
    for (int c = 0; c < kChains; ++c) acc[c] = _mm512_fmadd_ps(acc[c], mul, add);
  }
  __m512 total = acc[0];
  for (int c = 1; c < kChains; ++c) total = _mm512_add_ps(total, acc[c]);
  float lanes[16];
  _mm512_storeu_ps(lanes, total);
  return lanes[0] + lanes[15];
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

}  // namespace fma_peak_detail

// GFLOP/s (2 per lane per FMA), the median of 5 runs of ~10-20 ms each.
inline double fma_peak_gflops() {
  using namespace fma_peak_detail;
  const bool avx512 = __builtin_cpu_supports("avx512f");
  if (!avx512 && !(__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))) return 0;
  const int lanes = avx512 ? 16 : 8;
  std::vector<double> rates;
  volatile float sink = 0;
  for (int r = 0; r < 5; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    sink = sink + (avx512 ? chains_avx512() : chains_avx2());
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    rates.push_back(2.0 * lanes * kChains * double(kSteps) / s / 1e9);
  }
  return median(rates);
}
