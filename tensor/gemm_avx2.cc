// AVX2 + FMA micro-kernel: a 6 x 16 tile of C in 12 ymm registers (6 rows x 2 vectors of 8
// floats), leaving 4 of the 16 registers for B's two vectors and A's broadcast. Per step k:
// 2 loads and 6 broadcasts feed 12 FMAs.
//
// Compiled for AVX2/FMA through a function attribute only; gemm.cc calls it only when the
// CPU reports both. Blocking: the B micro-panel KC x 16 = 16 KiB at KC = 256 stays in L1;
// the packed A block MC x KC = 120 x 256 x 4 B = 120 KiB sits in L2.
#include <immintrin.h>

#include "tensor/gemm_kernels.h"

namespace engine::detail {
namespace {

constexpr int kMR = 6, kNR = 16;

__attribute__((target("avx2,fma"))) void avx2_kernel(int64_t kc, const float* a, const float* b, float* c,
                                                      int64_t rsc, bool accumulate) {
  __m256 acc[kMR][2];
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m256 b0 = _mm256_loadu_ps(b), b1 = _mm256_loadu_ps(b + 8);
#pragma GCC unroll 6
    for (int i = 0; i < kMR; ++i) {
      const __m256 ai = _mm256_broadcast_ss(a + i);
      acc[i][0] = _mm256_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm256_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMR;
    b += kNR;
  }
#pragma GCC unroll 6
  for (int i = 0; i < kMR; ++i) {
    float* row = c + i * rsc;
    if (accumulate) {
      acc[i][0] = _mm256_add_ps(acc[i][0], _mm256_loadu_ps(row));
      acc[i][1] = _mm256_add_ps(acc[i][1], _mm256_loadu_ps(row + 8));
    }
    _mm256_storeu_ps(row, acc[i][0]);
    _mm256_storeu_ps(row + 8, acc[i][1]);
  }
}

}  // namespace

MicroKernel avx2_micro_kernel() { return {"avx2 6x16", kMR, kNR, 256, 120, 4096, avx2_kernel}; }

}  // namespace engine::detail
