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

__attribute__((target("avx2,fma"))) void avx2_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t rsc,
                                                     bool accumulate) {
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

MicroKernel avx2_micro_kernel() { return {"avx2 6x16", kMR, kNR, 256, 120, 4096, avx2_kernel, 0, nullptr}; }

}  // namespace engine::detail

namespace engine::detail {

// Packs one NR-column panel of B when B's columns are contiguous (B = W^T for a row-major
// W, as in y = x W^T): element (k, j) is at src[j * ld + k]. Reading 8 columns x 8 k at a
// time and transposing the 8x8 block in registers turns 64 scattered stores into 8 vector
// stores. The last columns (past a multiple of 8) and the k remainder take the plain scalar
// path; padding columns past `cols` are zeroed with vector stores.
__attribute__((target("avx2"))) void pack_b_columns_avx2(int nr, int64_t kc, int64_t cols, const float* src, int64_t ld,
                                                         float* Bp) {
  int64_t j0 = 0;
  for (; j0 + 8 <= cols; j0 += 8) {
    int64_t k0 = 0;
    for (; k0 + 8 <= kc; k0 += 8) {
      __m256 r[8];
      for (int j = 0; j < 8; ++j) r[j] = _mm256_loadu_ps(src + (j0 + j) * ld + k0);
      // 8x8 transpose: interleave pairs, then quads, then swap 128-bit halves.
      __m256 t[8], u[8];
      for (int j = 0; j < 8; j += 2) {
        t[j] = _mm256_unpacklo_ps(r[j], r[j + 1]);
        t[j + 1] = _mm256_unpackhi_ps(r[j], r[j + 1]);
      }
      for (int j = 0; j < 8; j += 4) {
        u[j] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 1] = _mm256_shuffle_ps(t[j], t[j + 2], _MM_SHUFFLE(3, 2, 3, 2));
        u[j + 2] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(1, 0, 1, 0));
        u[j + 3] = _mm256_shuffle_ps(t[j + 1], t[j + 3], _MM_SHUFFLE(3, 2, 3, 2));
      }
      for (int k = 0; k < 4; ++k) {
        _mm256_storeu_ps(Bp + (k0 + k) * nr + j0, _mm256_permute2f128_ps(u[k], u[k + 4], 0x20));
        _mm256_storeu_ps(Bp + (k0 + k + 4) * nr + j0, _mm256_permute2f128_ps(u[k], u[k + 4], 0x31));
      }
    }
    for (; k0 < kc; ++k0)
      for (int j = 0; j < 8; ++j) Bp[k0 * nr + j0 + j] = src[(j0 + j) * ld + k0];
  }
  // Columns j0 .. nr-1 (j0 a multiple of 8, as nr is): the last few real ones, then padding.
  // Zeroed first with vector stores along each k, then the real ones written over them.
  if (j0 < nr)
    for (int64_t k = 0; k < kc; ++k)
      for (int64_t j = j0; j < nr; j += 8) _mm256_storeu_ps(Bp + k * nr + j, _mm256_setzero_ps());
  for (int64_t j = j0; j < cols; ++j)
    for (int64_t k = 0; k < kc; ++k) Bp[k * nr + j] = src[j * ld + k];
}

}  // namespace engine::detail
