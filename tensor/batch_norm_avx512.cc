// batch_norm.cc's row loops with AVX-512 (tensor/batch_norm_cpu.h). Multiplies and adds are
// the _round_ forms, which the compiler never contracts into a fused multiply-add, so
// every value equals the portable loop's. (Their masked forms, and masked loads, give
// GCC 12's intrinsics a defined source to merge with.)
#include <immintrin.h>

#include "tensor/batch_norm_cpu.h"

namespace engine::detail {

namespace {
constexpr int kCur = _MM_FROUND_CUR_DIRECTION;

__attribute__((target("avx512f"))) inline __m512 mul(__m512 a, __m512 b) {
  return _mm512_maskz_mul_round_ps(0xFFFF, a, b, kCur);
}
__attribute__((target("avx512f"))) inline __m512 add(__m512 a, __m512 b) {
  return _mm512_maskz_add_round_ps(0xFFFF, a, b, kCur);
}
__attribute__((target("avx512f"))) inline __m512 sub(__m512 a, __m512 b) {
  return _mm512_maskz_sub_round_ps(0xFFFF, a, b, kCur);
}

// Bit i of m moved to bit 2i (8 bits -> 16).
inline unsigned spread_bits(unsigned m) {
  m = (m | (m << 4)) & 0x0F0Fu;
  m = (m | (m << 2)) & 0x3333u;
  return (m | (m << 1)) & 0x5555u;
}
}  // namespace

bool batch_norm_avx512() {
  static const bool ok = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512vl");
  return ok;
}

namespace {
// lane_sum's last step: the tail (added by the caller into total) and then the 16 lanes,
// in double.
__attribute__((target("avx512f"))) double add_lanes(double total, __m512 lanes) {
  alignas(64) float l[16];
  _mm512_store_ps(l, lanes);
  for (float v : l) total += v;
  return total;
}
}  // namespace

__attribute__((target("avx512f"))) double sum_avx512(int64_t S, const float* x) {
  __m512 a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= S; i += 16) a = add(a, _mm512_loadu_ps(x + i));
  double total = 0;
  for (; i < S; ++i) total += x[i];
  return add_lanes(total, a);
}

__attribute__((target("avx512f"))) double squared_deviations_avx512(int64_t S, const float* x, float mean) {
  const __m512 m = _mm512_set1_ps(mean);
  __m512 a = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= S; i += 16) {
    const __m512 d = sub(_mm512_loadu_ps(x + i), m);
    a = add(a, mul(d, d));
  }
  double total = 0;
  for (; i < S; ++i) total += (x[i] - mean) * (x[i] - mean);
  return add_lanes(total, a);
}

__attribute__((target("avx512f"))) void normalise_row_avx512(int64_t S, const float* x, float scale, float shift,
                                                             bool relu, float* out) {
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift), zero = _mm512_setzero_ps();
  for (int64_t i = 0; i < S; i += 16) {
    const __mmask16 live = S - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (S - i)) - 1);
    const __m512 y = add(mul(_mm512_maskz_loadu_ps(live, x + i), vscale), vshift);
    const __mmask16 keep = relu ? _mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ) : __mmask16(0xFFFF);
    _mm512_mask_storeu_ps(out + i, live, _mm512_maskz_mov_ps(keep, y));
  }
}

__attribute__((target("avx512f"))) RowSums row_sums_avx512(int64_t S, const float* d, const float* x, float mean) {
  const __m512 m = _mm512_set1_ps(mean);
  __m512 a = _mm512_setzero_ps(), b = _mm512_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= S; i += 16) {
    const __m512 dv = _mm512_loadu_ps(d + i);
    a = add(a, dv);
    b = add(b, mul(dv, sub(_mm512_loadu_ps(x + i), m)));
  }
  RowSums r;
  for (; i < S; ++i) {
    r.dy += d[i];
    r.dy_xc += d[i] * (x[i] - mean);
  }
  r.dy = add_lanes(r.dy, a);
  r.dy_xc = add_lanes(r.dy_xc, b);
  return r;
}

__attribute__((target("avx512f"))) void batch_norm_dx_avx512(int64_t S, const float* d, const float* x, float mean,
                                                             float k, float mean_dy, float slope, float* out) {
  const __m512 vm = _mm512_set1_ps(mean), vk = _mm512_set1_ps(k), vmd = _mm512_set1_ps(mean_dy),
               vs = _mm512_set1_ps(slope);
  for (int64_t i = 0; i < S; i += 16) {
    const __mmask16 live = S - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (S - i)) - 1);
    const __m512 dv = _mm512_maskz_loadu_ps(live, d + i), xv = _mm512_maskz_loadu_ps(live, x + i);
    _mm512_mask_storeu_ps(out + i, live, mul(vk, sub(sub(dv, vmd), mul(sub(xv, vm), vs))));
  }
}

// With 8 windows at a time: relu(y) of both rows as the forward pooled it, each window's
// maximum found again by the forward's rule (max_pool_2x2_avx512 in nn_ops.cc: the first
// maximum, row by row, wins, and the first NaN), and the gradient put there.
__attribute__((target("avx512f,avx512vl"))) void relu_pool2_grad_plane_avx512(int64_t H, int64_t W, const float* g,
                                                                              const float* x, float scale, float shift,
                                                                              float* out) {
  const int64_t OH = H / 2, OW = W / 2;
  const __m512 zero = _mm512_setzero_ps(), vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  // Window j's gradient into lanes 2j and 2j+1 (its left and right column).
  const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  // A row's 16 values into lanes 0-7 (the windows' left columns) and 8-15 (right).
  const __m512i split = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 1, 3, 5, 7, 9, 11, 13, 15);
  for (int64_t oy = 0; oy < OH; ++oy) {
    for (int64_t ox = 0; ox < OW; ox += 8) {
      const int count = int(OW - ox < 8 ? OW - ox : 8);
      const __mmask8 windows = __mmask8((1u << count) - 1);
      const __mmask16 cols = __mmask16((1u << (2 * count)) - 1);
      const int64_t at_row[2] = {2 * oy * W + 2 * ox, (2 * oy + 1) * W + 2 * ox};
      __mmask16 passes[2];
      __m256 cand[4];  // the windows' top-left, top-right, bottom-left, bottom-right relu(y)
      for (int r = 0; r < 2; ++r) {
        const __m512 y = add(mul(_mm512_maskz_loadu_ps(cols, x + at_row[r]), vscale), vshift);
        passes[r] = _mm512_cmp_ps_mask(y, zero, _CMP_NLE_UQ);  // relu: !(y <= 0), NaN passes
        const __m512 sides = _mm512_mask_permutexvar_ps(zero, 0xFFFF, split, _mm512_maskz_mov_ps(passes[r], y));
        cand[2 * r] =
            _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xFF, _mm512_castps_pd(sides), 0));
        cand[2 * r + 1] =
            _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xFF, _mm512_castps_pd(sides), 1));
      }
      __mmask8 at[4] = {0xFF, 0, 0, 0};  // bit j of at[k]: window j's maximum is its value k
      __m256 best = cand[0];
      for (int k = 1; k < 4; ++k) {
        const __mmask8 take =
            _mm256_cmp_ps_mask(cand[k], best, _CMP_GT_OQ) |
            (_mm256_cmp_ps_mask(cand[k], cand[k], _CMP_UNORD_Q) & _mm256_cmp_ps_mask(best, best, _CMP_ORD_Q));
        best = _mm256_mask_blend_ps(take, best, cand[k]);
        for (int j = 0; j < k; ++j) at[j] = __mmask8(at[j] & ~take);
        at[k] = take;
      }
      const unsigned in_row[2] = {spread_bits(at[0]) | spread_bits(at[1]) << 1, spread_bits(at[2]) | spread_bits(at[3])
                                                                                                         << 1};
      // 0 + g, as max_pool2d_backward adds it onto zeros (so -0 becomes +0).
      const __m512 grad =
          add(zero, _mm512_mask_permutexvar_ps(zero, 0xFFFF, twice, _mm512_maskz_loadu_ps(windows, g + oy * OW + ox)));
      for (int r = 0; r < 2; ++r)
        _mm512_mask_storeu_ps(out + at_row[r], cols, _mm512_maskz_mov_ps(__mmask16(in_row[r] & passes[r]), grad));
    }
    if (W % 2)  // the last column is in no window
      for (int r = 0; r < 2; ++r) out[(2 * oy + r) * W + W - 1] = 0.0f;
  }
  if (H % 2)  // nor is the last row
    for (int64_t i = (H - 1) * W; i < H * W; ++i) out[i] = 0.0f;
}

}  // namespace engine::detail
