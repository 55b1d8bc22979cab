// Internal to tensor/: the vectorised 2x2 max-pool of one row of windows, used by
// max_pool2d_forward (nn_ops.cc), and its rule on 8 windows (window_maxima), which the
// fused BatchNorm + ReLU + pool (batch_norm_avx512.cc) shares.
//
//   if (detail::max_pool_2x2_vectorised())
//     detail::max_pool_2x2_row(row0, row1, top, W, OW, out, where);
#pragma once

#include <immintrin.h>

#include <cstdint>

namespace engine::detail {

// Whether this CPU runs max_pool_2x2_row (AVX-512F and VL).
bool max_pool_2x2_vectorised();
// Outputs 0 .. OW-1 of one row of 2x2 windows over rows r0 and r1 (each W floats): the
// first maximum (row by row) wins, and the first NaN; where (unless null) = top + its column, plus W in r1
// (top: the flat index of r0[0] in the whole input).
void max_pool_2x2_row(const float* r0, const float* r1, int64_t top, int64_t W, int64_t OW, float* out, int64_t* where);

// The 2x2 windows' rule on 8 windows at once, given 16 values of each of the two rows
// (columns 2j and 2j+1 are window j's): the first maximum, row by row, wins, and the first
// NaN. best gets each window's maximum; bit j of at[k] says window j's maximum is its
// value k (0, 1: top row, left and right; 2, 3: bottom row). The fused forward runs it
// on chunks that hold a NaN; its other chunks and the fused backward apply the same rule
// by other means (batch_norm_avx512.cc), checked against the separate layers bit for bit.
__attribute__((target("avx512f,avx512vl"))) inline void window_maxima(__m512 top, __m512 bottom, __m256& best,
                                                                      __mmask8 at[4]) {
  // Each row into lanes 0-7 (the windows' left columns) and 8-15 (right). (The masked
  // forms, all lanes on, give GCC 12's intrinsics a defined source to merge with.)
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  __m256 cand[4];
  for (int r = 0; r < 2; ++r) {
    const __m512 sides = _mm512_mask_permutexvar_ps(_mm512_setzero_ps(), 0xFFFF, split, r == 0 ? top : bottom);
    // (Two lines, not a loop: the half's index must be a constant to every compiler.)
    cand[2 * r] = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xFF, _mm512_castps_pd(sides), 0));
    cand[2 * r + 1] =
        _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xFF, _mm512_castps_pd(sides), 1));
  }
  best = cand[0];
  at[0] = 0xFF;
  for (int k = 1; k < 4; ++k) {
    const __mmask8 take =
        _mm256_cmp_ps_mask(cand[k], best, _CMP_GT_OQ) |
        (_mm256_cmp_ps_mask(cand[k], cand[k], _CMP_UNORD_Q) & _mm256_cmp_ps_mask(best, best, _CMP_ORD_Q));
    best = _mm256_mask_blend_ps(take, best, cand[k]);
    for (int j = 0; j < k; ++j) at[j] = __mmask8(at[j] & ~take);
    at[k] = take;
  }
}

}  // namespace engine::detail
