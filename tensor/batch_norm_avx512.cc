// batch_norm.cc's row loops with AVX-512 (tensor/batch_norm_cpu.h). Multiplies and adds are
// never fused (unfused_avx512.h), so every value equals the portable loop's. (Masked loads
// give GCC 12's intrinsics a defined source to merge with.)
#include <immintrin.h>

#include "tensor/batch_norm_cpu.h"
#include "tensor/cpu_features.h"
#include "tensor/max_pool_cpu.h"
#include "tensor/unfused_avx512.h"

namespace engine::detail {

namespace {
using unfused::add;
using unfused::mul;
using unfused::sub;

// relu(x scale + shift), and in `passes` where relu let y through: !(y <= 0), so NaN passes.
__attribute__((target("avx512f"))) inline __m512 relu_affine(__m512 x, __m512 scale, __m512 shift, __mmask16& passes) {
  const __m512 y = add(mul(x, scale), shift);
  passes = _mm512_cmp_ps_mask(y, _mm512_setzero_ps(), _CMP_NLE_UQ);
  return _mm512_maskz_mov_ps(passes, y);
}

// relu(y) (>= +0, or NaN) as an integer that orders the way max_pool2d's rule does: by
// value, and every NaN alike and above +inf. Unsigned, the bits of floats >= +0 order as
// their values do, and every NaN's (either sign) lies above +inf's: each is made the same.
__attribute__((target("avx512f"))) inline __m512i pool_key(__m512 relu_y) {
  return _mm512_maskz_min_epu32(0xFFFF, _mm512_castps_si512(relu_y), _mm512_set1_epi32(0x7F800001));
}
}  // namespace

bool batch_norm_avx512() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512vl");
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

// 8 windows at a time: both rows' relu(x scale + shift) made in registers and pooled there,
// so the activations are never stored and loaded back. A window's maximum is the largest
// of its four keys (pool_key), which for numbers are their bits (ties have the same bits).
// A NaN's key says only that it is one; max_pool2d's rule then wants the window's first
// NaN, so a chunk holding a NaN is pooled by that rule itself (window_maxima, max_pool_cpu.h).
__attribute__((target("avx512f,avx512vl"))) void relu_pool2_plane_avx512(int64_t H, int64_t W, const float* x,
                                                                         float scale, float shift, float* out) {
  const int64_t OH = H / 2, OW = W / 2;
  const __m512 vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  const __m512i even = _mm512_setr_epi32(0, 2, 4, 6, 8, 10, 12, 14, 0, 0, 0, 0, 0, 0, 0, 0),
                inf = _mm512_set1_epi32(0x7F800000);
  for (int64_t oy = 0; oy < OH; ++oy)
    for (int64_t ox = 0; ox < OW; ox += 8) {
      const int count = int(OW - ox < 8 ? OW - ox : 8);
      const __mmask16 cols = __mmask16((1u << (2 * count)) - 1);
      __m512 relu_y[2];
      __mmask16 passes;
      for (int r = 0; r < 2; ++r)
        relu_y[r] = relu_affine(_mm512_maskz_loadu_ps(cols, x + (2 * oy + r) * W + 2 * ox), vscale, vshift, passes);
      const __m512i rows = _mm512_maskz_max_epu32(0xFFFF, pool_key(relu_y[0]), pool_key(relu_y[1]));
      const __m512i window =
          _mm512_maskz_max_epu32(0xFFFF, rows, _mm512_maskz_shuffle_epi32(0xFFFF, rows, _MM_PERM_CDAB));
      __m256 best;                                 // window j's maximum, from lane 2j
      if (_mm512_cmpgt_epu32_mask(window, inf)) {  // a NaN's key
        __mmask8 at[4];
        window_maxima(relu_y[0], relu_y[1], best, at);
      } else {
        const __m512 maxima = _mm512_maskz_permutexvar_ps(0xFFFF, even, _mm512_castsi512_ps(window));
        best = _mm256_castpd_ps(_mm512_mask_extractf64x4_pd(_mm256_setzero_pd(), 0xFF, _mm512_castps_pd(maxima), 0));
      }
      _mm256_mask_storeu_ps(out + oy * OW + ox, __mmask8((1u << count) - 1), best);
    }
}

// 8 windows at a time, 16 lanes per row (window j's left and right columns in lanes 2j and
// 2j+1). max_pool2d's rule, running through a window's values in order (top-left, top-right,
// bottom-left, bottom-right) and taking one that is greater (a NaN beats any number, then
// nothing beats it), ends at value k exactly when k is above every value before it and
// at least every value after it. So each lane compares its key with its row neighbour (the
// other of its pair), the lane below or above, and that one's neighbour: the top row keeps
// >= towards the bottom row, the bottom row needs > towards the top, and within a row the
// left lane keeps >= and the right needs >.
__attribute__((target("avx512f,avx512vl"))) void relu_pool2_grad_plane_avx512(int64_t H, int64_t W, const float* g,
                                                                              const float* x, float scale, float shift,
                                                                              float* out) {
  const int64_t OH = H / 2, OW = W / 2;
  const __m512 zero = _mm512_setzero_ps(), vscale = _mm512_set1_ps(scale), vshift = _mm512_set1_ps(shift);
  // Window j's gradient into lanes 2j and 2j+1.
  const __m512i twice = _mm512_setr_epi32(0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 7, 7);
  const __mmask16 left = 0x5555, right = 0xAAAA;
  for (int64_t oy = 0; oy < OH; ++oy) {
    for (int64_t ox = 0; ox < OW; ox += 8) {
      const int count = int(OW - ox < 8 ? OW - ox : 8);
      const __mmask8 windows = __mmask8((1u << count) - 1);
      const __mmask16 cols = __mmask16((1u << (2 * count)) - 1);
      const int64_t at_row[2] = {2 * oy * W + 2 * ox, (2 * oy + 1) * W + 2 * ox};
      __mmask16 passes[2];
      __m512i key[2], pair[2];  // each lane's key, and its row neighbour's
      for (int r = 0; r < 2; ++r) {
        key[r] = pool_key(relu_affine(_mm512_maskz_loadu_ps(cols, x + at_row[r]), vscale, vshift, passes[r]));
        pair[r] = _mm512_maskz_shuffle_epi32(0xFFFF, key[r], _MM_PERM_CDAB);  // swap lanes 2j, 2j+1
      }
      const __mmask16 top = _mm512_mask_cmpge_epu32_mask(left, key[0], pair[0]) |
                            _mm512_mask_cmpgt_epu32_mask(right, key[0], pair[0]),
                      top_wins =
                          top & _mm512_cmpge_epu32_mask(key[0], key[1]) & _mm512_cmpge_epu32_mask(key[0], pair[1]);
      const __mmask16 bottom = _mm512_mask_cmpge_epu32_mask(left, key[1], pair[1]) |
                               _mm512_mask_cmpgt_epu32_mask(right, key[1], pair[1]),
                      bottom_wins =
                          bottom & _mm512_cmpgt_epu32_mask(key[1], key[0]) & _mm512_cmpgt_epu32_mask(key[1], pair[0]);
      const __mmask16 wins[2] = {top_wins, bottom_wins};
      // 0 + g, as max_pool2d_backward adds it onto zeros (so -0 becomes +0).
      const __m512 grad =
          add(zero, _mm512_mask_permutexvar_ps(zero, 0xFFFF, twice, _mm512_maskz_loadu_ps(windows, g + oy * OW + ox)));
      for (int r = 0; r < 2; ++r)
        _mm512_mask_storeu_ps(out + at_row[r], cols, _mm512_maskz_mov_ps(__mmask16(wins[r] & passes[r]), grad));
    }
    if (W % 2)  // the last column is in no window
      for (int r = 0; r < 2; ++r) out[(2 * oy + r) * W + W - 1] = 0.0f;
  }
  if (H % 2)  // nor is the last row
    for (int64_t i = (H - 1) * W; i < H * W; ++i) out[i] = 0.0f;
}

}  // namespace engine::detail
