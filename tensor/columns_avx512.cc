// im2col and col2im at stride 1 with AVX-512 (tensor/columns_cpu.h). At stride 1 each
// (channel, kernel row, kernel column, output row) is one run of output columns: a shifted
// copy of an image row, with zeros where the window hangs over the padding. The runs are
// short (14 floats for the lessons' second layer, 4,032 of them per image), so they are
// done with masked vector loads and stores in place: no call per run (memmove, memset, a
// lambda), which cost more than the copy itself. The order of everything, the sums of
// col2im included, is nn_ops.cc's for_each_window_run's, so results equal the plain loops.
#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/columns_cpu.h"
#include "tensor/cpu_features.h"

namespace engine::detail {

namespace {

// Lanes [lo, hi) of 16, clamped to [0, 16).
inline __mmask16 lanes(int64_t lo, int64_t hi) {
  lo = std::max<int64_t>(lo, 0);
  hi = std::min<int64_t>(hi, 16);
  if (lo >= hi) return 0;
  return __mmask16(((1u << hi) - 1) & ~((1u << lo) - 1));
}

// row + k as an address, k possibly negative: a masked access never touches the lanes it
// leaves out, so the lanes before a row's start (the padding) are never read or written.
template <class T>
inline T* shifted(T* row, int64_t k) {
  return reinterpret_cast<T*>(reinterpret_cast<uintptr_t>(row) + k * int64_t(sizeof(float)));
}

// One (n, c, i, j) of the geometry: where its runs start in the columns, which output
// columns [lo, hi) read the image, and that image row's offset for output column 0.
struct Runs {
  int64_t lo, hi;
};
inline Runs runs_of(int64_t j, int64_t W, int64_t OW, int64_t p) {
  const int64_t lo = std::min(OW, std::max<int64_t>(0, p - j));
  const int64_t last = W - 1 + p - j;  // ox <= last
  return {lo, last < 0 ? lo : std::max(lo, std::min(OW, last + 1))};
}

// Where column row `row` of image n starts; `ld` is the distance between PerImage rows.
inline int64_t column_start(const Shape& xs, int64_t kh, int64_t kw, ColumnLayout layout, int64_t n, int64_t row,
                            int64_t L, int64_t ld) {
  return layout == ColumnLayout::BatchInColumns ? (row * xs[0] + n) * L : (n * xs[1] * kh * kw + row) * ld;
}

// Output rows [from, to) of OW floats, all padding: zeros.
__attribute__((target("avx512f"))) void zero_rows(float* o, int64_t from, int64_t to, int64_t OW,
                                                  const std::vector<__mmask16>& live) {
  for (int64_t oy = from; oy < to; ++oy)
    for (size_t ch = 0; ch < live.size(); ++ch)
      _mm512_mask_storeu_ps(o + oy * OW + 16 * int64_t(ch), live[ch], _mm512_setzero_ps());
}

}  // namespace

bool columns_avx512() {
  static const bool ok = cpu_has_avx512();
  return ok;
}

__attribute__((target("avx512f"))) void im2col_stride1_avx512(const float* x, const Shape& xs, int64_t kh, int64_t kw,
                                                              int64_t p, ColumnLayout layout, float* cols,
                                                              int64_t row_stride) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OH = H + 2 * p - kh + 1, OW = W + 2 * p - kw + 1;
  const int64_t ld = row_stride > 0 ? row_stride : OH * OW;
  const int64_t chunks = (OW + 15) / 16;
  // Per kernel column j, per 16 output columns: which lanes read the image (the rest are
  // padding) and which exist. The same for every output row, so made once per j.
  std::vector<__mmask16> read(static_cast<size_t>(kw * chunks)), live(static_cast<size_t>(chunks));
  for (int64_t ch = 0; ch < chunks; ++ch) live[size_t(ch)] = lanes(0, OW - 16 * ch);
  for (int64_t j = 0; j < kw; ++j) {
    const Runs r = runs_of(j, W, OW, p);
    for (int64_t ch = 0; ch < chunks; ++ch) read[size_t(j * chunks + ch)] = lanes(r.lo - 16 * ch, r.hi - 16 * ch);
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i) {
        // Output rows [top, bottom) read image rows oy + i - p; the others are padding.
        const int64_t top = std::min(OH, std::max<int64_t>(0, p - i)), bottom = std::max(top, std::min(OH, H + p - i));
        for (int64_t j = 0; j < kw; ++j) {
          const __mmask16* reads = read.data() + j * chunks;
          float* o = cols + column_start(xs, kh, kw, layout, n, (c * kh + i) * kw + j, OH * OW, ld);
          zero_rows(o, 0, top, OW, live);
          // output column ox of row oy reads src[oy * W + ox]
          const float* src = x + ((n * C + c) * H + i - p) * W + j - p;
          if (chunks == 1) {  // rows of at most 16 (the lessons' second layer): masks held in registers
            const __mmask16 in = reads[0], out = live[0];
            for (int64_t oy = top; oy < bottom; ++oy)
              _mm512_mask_storeu_ps(o + oy * OW, out, _mm512_maskz_loadu_ps(in, shifted(src, oy * W)));
          } else {
            for (int64_t oy = top; oy < bottom; ++oy)
              for (int64_t ch = 0; ch < chunks; ++ch)
                _mm512_mask_storeu_ps(o + oy * OW + 16 * ch, live[size_t(ch)],
                                      _mm512_maskz_loadu_ps(reads[ch], shifted(src, oy * W + 16 * ch)));
          }
          zero_rows(o, bottom, OH, OW, live);
        }
      }
}

// Image row y of channel c takes, from each kernel row i, the kw runs of columns that read
// it (kernel columns j, shifted by j - p): added in registers, kernel column by kernel
// column, and the row loaded and stored once per i, not once per run: runs that overlap
// by a float or two, stored and then loaded back at once, would each wait for the last
// store to complete. Each pixel still receives its terms in for_each_window_run's order
// (i, then j), and masked-off lanes are left alone (adding 0 would turn -0 into +0).
__attribute__((target("avx512f"))) void col2im_add_stride1_avx512(const float* cols, const Shape& xs, int64_t kh,
                                                                  int64_t kw, int64_t p, ColumnLayout layout,
                                                                  float* x) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3], OH = H + 2 * p - kh + 1, OW = W + 2 * p - kw + 1;
  const int64_t chunks = (W + 15) / 16;
  // Per 16 image columns X: which lanes exist, and per kernel column j which take a term
  // (image column X + lane is output column X + lane + p - j, which must be in [0, OW)).
  std::vector<__mmask16> live(static_cast<size_t>(chunks)), from(static_cast<size_t>(kw * chunks));
  for (int64_t ch = 0; ch < chunks; ++ch) {
    const int64_t X = 16 * ch;
    live[size_t(ch)] = lanes(0, W - X);
    for (int64_t j = 0; j < kw; ++j) from[size_t(ch * kw + j)] = live[size_t(ch)] & lanes(j - p - X, OW + j - p - X);
  }
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t oy = 0; oy < OH; ++oy) {
          const int64_t y = oy + i - p;
          if (y < 0 || y >= H) continue;
          float* dst = x + ((n * C + c) * H + y) * W;
          for (int64_t ch = 0; ch < chunks; ++ch) {
            const int64_t X = 16 * ch;
            __m512 d = _mm512_maskz_loadu_ps(live[size_t(ch)], dst + X);
            for (int64_t j = 0; j < kw; ++j) {
              const __mmask16 take = from[size_t(ch * kw + j)];
              const float* run =
                  cols + column_start(xs, kh, kw, layout, n, (c * kh + i) * kw + j, OH * OW, OH * OW) + oy * OW;
              d = _mm512_mask_add_ps(d, take, d, _mm512_maskz_loadu_ps(take, shifted(run, X + p - j)));
            }
            _mm512_mask_storeu_ps(dst + X, live[size_t(ch)], d);
          }
        }
}

}  // namespace engine::detail
