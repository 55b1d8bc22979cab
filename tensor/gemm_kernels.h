// Internal to the GEMM: the micro-kernel interface each SIMD level implements.
//
// A micro-kernel computes one MR x NR tile of C from packed panels:
//   c[i*rsc + j] (+)= sum_{k < kc} a[k*MR + i] * b[k*NR + j]     for i < MR, j < NR
// `a` holds MR rows of A column by column (a "micro-panel"), `b` holds NR columns of B row
// by row, both packed by gemm.cc so the kernel reads them with unit stride.
#pragma once

#include <cstdint>

namespace engine::detail {

using MicroKernelFn = void (*)(int64_t kc, const float* a, const float* b, float* c, int64_t rsc, bool accumulate);
// The same reading B where it lies: row k of the NR columns at b + k * ldb.
using MicroKernelInPlaceFn = void (*)(int64_t kc, const float* a, const float* b, int64_t ldb, float* c, int64_t rsc,
                                      bool accumulate);

struct MicroKernel {
  const char* name;
  int mr, nr;  // tile size
  // Cache blocking for this kernel (see gemm.cc): kc, mc, nc.
  int kc, mc, nc;
  MicroKernelFn run;
  // Optional: the same for an edge tile of at most `narrow` columns, reading the same
  // NR-wide packed panels (so a tile of 4 columns does not pay for 32).
  int narrow = 0;
  MicroKernelFn run_narrow = nullptr;
  // Optional: the full tile from a row-major B read in place, so whole panels of B need no
  // packed copy (gemm.cc decides when its rows are far enough apart for the caches).
  MicroKernelInPlaceFn run_b_in_place = nullptr;
};

MicroKernel scalar_micro_kernel();
MicroKernel avx2_micro_kernel();
MicroKernel avx512_micro_kernel();

// Packs kc x nr of B whose columns are contiguous (element (k, j) at src[j*ld + k]) into
// the micro-panel layout, transposing 8x8 blocks with AVX2. Needs an AVX2 CPU.
void pack_b_columns_avx2(int nr, int64_t kc, int64_t cols, const float* src, int64_t ld, float* Bp);

}  // namespace engine::detail
