// AVX-512 micro-kernel: an 8 x 32 tile of C held in 16 zmm registers (8 rows x 2 vectors
// of 16 floats). Per step k: load 2 vectors of B's row k, broadcast each of A's 8 values of
// column k, and issue 16 fused multiply-adds, so 10 loads feed 16 FMAs (512 flops).
//
// Why 8 rows and not more: 16 independent accumulators already cover the FMA latency
// (4 cycles at one 512-bit FMA per cycle on Zen 4), and 8 divides the batch sizes a model
// trains with (64, 256), so no tile is wasted on padding rows. A 12 x 32 tile measured
// 0.70-0.73x OpenBLAS on the MLP's M = 64 shapes; 8 x 32 measures 0.97-1.07x.
//
// Compiled for AVX-512 through a function attribute only, so the rest of the binary runs on
// any x86-64; gemm.cc calls it only when the CPU reports avx512f.
//
// Blocking (see gemm.cc): a B micro-panel is KC x 32 floats = 32 KiB at KC = 256, read
// from L1/L2 once per A micro-panel; the packed A block MC x KC = 96 x 256 x 4 B = 96 KiB
// sits in L2.
#include <immintrin.h>

#include "tensor/gemm_kernels.h"

namespace engine::detail {
namespace {

constexpr int kMR = 8, kNR = 32;

// The tile, with B's rows ldb floats apart: kNR in a packed panel, B's row stride in place.
__attribute__((target("avx512f"))) inline void tile_8x32(int64_t kc, const float* a, const float* b, int64_t ldb,
                                                         float* c, int64_t rsc, bool accumulate) {
  __m512 acc[kMR][2];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b), b1 = _mm512_loadu_ps(b + 16);
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) {
      const __m512 ai = _mm512_set1_ps(a[i]);
      acc[i][0] = _mm512_fmadd_ps(ai, b0, acc[i][0]);
      acc[i][1] = _mm512_fmadd_ps(ai, b1, acc[i][1]);
    }
    a += kMR;
    b += ldb;
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
    float* row = c + i * rsc;
    if (accumulate) {
      acc[i][0] = _mm512_add_ps(acc[i][0], _mm512_loadu_ps(row));
      acc[i][1] = _mm512_add_ps(acc[i][1], _mm512_loadu_ps(row + 16));
    }
    _mm512_storeu_ps(row, acc[i][0]);
    _mm512_storeu_ps(row + 16, acc[i][1]);
  }
}

__attribute__((target("avx512f"))) void avx512_kernel(int64_t kc, const float* a, const float* b, float* c, int64_t rsc,
                                                      bool accumulate) {
  tile_8x32(kc, a, b, kNR, c, rsc, accumulate);
}

__attribute__((target("avx512f"))) void avx512_kernel_b_in_place(int64_t kc, const float* a, const float* b,
                                                                 int64_t ldb, float* c, int64_t rsc, bool accumulate) {
  tile_8x32(kc, a, b, ldb, c, rsc, accumulate);
}

// An edge tile of at most 16 columns: 8 x 16, one vector per row, from the same 32-wide
// B panels. 8 accumulators still cover the FMA latency; half the work of the full tile.
__attribute__((target("avx512f"))) void avx512_kernel_narrow(int64_t kc, const float* a, const float* b, float* c,
                                                             int64_t rsc, bool accumulate) {
  __m512 acc[kMR];
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) acc[i] = _mm512_setzero_ps();
  for (int64_t k = 0; k < kc; ++k) {
    const __m512 b0 = _mm512_loadu_ps(b);
#pragma GCC unroll 8
    for (int i = 0; i < kMR; ++i) acc[i] = _mm512_fmadd_ps(_mm512_set1_ps(a[i]), b0, acc[i]);
    a += kMR;
    b += kNR;
  }
#pragma GCC unroll 8
  for (int i = 0; i < kMR; ++i) {
    float* row = c + i * rsc;
    if (accumulate) acc[i] = _mm512_add_ps(acc[i], _mm512_loadu_ps(row));
    _mm512_storeu_ps(row, acc[i]);
  }
}

}  // namespace

MicroKernel avx512_micro_kernel() {
  return {"avx512 8x32", kMR, kNR, 256, 96, 4096, avx512_kernel, 16, avx512_kernel_narrow, avx512_kernel_b_in_place};
}

}  // namespace engine::detail
