// The fused ops of nn_ops.h: argument checks and the CPU loops here, the same algorithm
// on a GPU in tensor/cuda/nn.cu and optim.cu.
#include "tensor/nn_ops.h"

#include <immintrin.h>

#include <algorithm>
#include <climits>
#include <cmath>

#include "tensor/columns_cpu.h"
#include "tensor/cpu_features.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/max_pool_cpu.h"
#include "tensor/ops.h"
#include "tensor/optim_cpu.h"

namespace engine {

void check_window(const char* op, const Shape& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  ENGINE_REQUIRE(x.size() == 4, "[", op, "] expects input (N, C, H, W), got shape ", shape_str(x));
  ENGINE_REQUIRE(stride > 0 && padding >= 0 && kh > 0 && kw > 0, "[", op,
                 "] needs kernel > 0, stride > 0, padding >= 0, got kernel ", kh, "x", kw, ", stride ", stride,
                 ", padding ", padding);
  // Past 2^31 no window fits in memory; the bound keeps H + 2 padding and the output size
  // from overflowing int64.
  constexpr int64_t kMax = INT32_MAX;
  ENGINE_REQUIRE(stride <= kMax && padding <= kMax && kh <= kMax && kw <= kMax, "[", op, "] kernel ", kh, "x", kw,
                 ", stride ", stride, " and padding ", padding, " must each be at most ", kMax);
  ENGINE_REQUIRE(x[2] + 2 * padding >= kh && x[3] + 2 * padding >= kw, "[", op, "] kernel ", kh, "x", kw,
                 " is larger than the padded input ", x[2] + 2 * padding, "x", x[3] + 2 * padding);
}

namespace {

// Walks the columns one run at a time: for every (n, c, i, j, oy), the run of OW entries
// (ox = 0 .. OW-1) that starts at column index col, calling f(col, OW, lo, hi, img): the
// entries ox in [lo, hi) read the image at img + (ox - lo) * s (its row y = oy s + i - p,
// columns x = ox s + j - p), the others fall in the padding (lo = hi = 0 when the whole
// row does). Runs instead of single entries keep the bounds tests out of the inner loops,
// which then copy (im2col) or add (col2im) contiguous spans when s = 1.
template <class F>
void for_each_window_run(const Shape& xs, int64_t kh, int64_t kw, int64_t s, int64_t p, ColumnLayout layout, F f,
                         int64_t row_stride = 0) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t OH = window_out_size(H, kh, s, p), OW = window_out_size(W, kw, s, p);
  const int64_t ld = row_stride > 0 ? row_stride : OH * OW;  // PerImage rows
  const bool side_by_side = layout == ColumnLayout::BatchInColumns;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j) {
          const int64_t row = (c * kh + i) * kw + j;  // (c, i, j) in the columns' row order
          int64_t col = side_by_side ? (row * N + n) * OH * OW : (n * C * kh * kw + row) * ld;
          // ox s + j - p in [0, W)  <=>  ox in [lo, hi)
          const int64_t lo = std::min(OW, std::max<int64_t>(0, (p - j + s - 1) / s));
          const int64_t last = W - 1 + p - j;  // ox s <= last (negative: no ox; / would round it up to 0)
          const int64_t hi = last < 0 ? lo : std::max(lo, std::min(OW, last / s + 1));
          for (int64_t oy = 0; oy < OH; ++oy, col += OW) {
            const int64_t y = oy * s + i - p;
            if (y < 0 || y >= H || lo >= hi)
              f(col, OW, int64_t(0), int64_t(0), int64_t(0));
            else
              f(col, OW, lo, hi, ((n * C + c) * H + y) * W + lo * s + j - p);
          }
        }
}

Shape columns_shape(const Shape& xs, int64_t kh, int64_t kw, int64_t s, int64_t p, ColumnLayout layout) {
  const int64_t L = window_out_size(xs[2], kh, s, p) * window_out_size(xs[3], kw, s, p);
  if (layout == ColumnLayout::BatchInColumns) return {xs[1] * kh * kw, xs[0] * L};
  return {xs[0], xs[1] * kh * kw, L};
}

void require_float(const char* op, const Tensor& t) {
  ENGINE_REQUIRE(t.dtype() == DType::Float32, "[", op, "] expects float32, got ", dtype_name(t.dtype()));
}

void require_same_device(const char* op, const Tensor& a, const char* a_name, const Tensor& b, const char* b_name) {
  ENGINE_REQUIRE(a.device() == b.device(), "[", op, "] ", a_name, " is on ", a.device().str(), " but ", b_name, " on ",
                 b.device().str());
}

}  // namespace

Tensor im2col(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding, ColumnLayout layout) {
  check_window("im2col", x.shape(), kh, kw, stride, padding);
  if (is_half(x.dtype())) return im2col(x.to(DType::Float32), kh, kw, stride, padding, layout).to(x.dtype());
  require_float("im2col", x);
  const Tensor xc = x.contiguous();
  const Shape& s = xc.shape();
  const Shape cs = columns_shape(s, kh, kw, stride, padding, layout);
  const bool side_by_side = layout == ColumnLayout::BatchInColumns;
  if (xc.device().is_cuda()) {  // every entry written by the kernel, padding as 0
    Tensor cols = empty(cs, DType::Float32, xc.device());
    cuda::im2col(xc.device().index, s[0], s[1], s[2], s[3], kh, kw, stride, padding, xc.data<float>(),
                 cols.data<float>(), side_by_side);
    return cols;
  }
  Tensor cols = empty(cs);  // every entry is written below, padding as 0
  detail::im2col_cpu(xc.data<float>(), s, kh, kw, stride, padding, layout, cols.data<float>());
  return cols;
}

Tensor col2im(const Tensor& cols, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
              ColumnLayout layout) {
  check_window("col2im", xs, kh, kw, stride, padding);
  if (is_half(cols.dtype()))  // the overlapping windows add up in float32
    return col2im(cols.to(DType::Float32), xs, kh, kw, stride, padding, layout).to(cols.dtype());
  require_float("col2im", cols);
  const Shape cs = columns_shape(xs, kh, kw, stride, padding, layout);
  ENGINE_REQUIRE(cols.shape() == cs, "[col2im] columns of shape ", shape_str(cols.shape()), " do not fit image ",
                 shape_str(xs), " (expected ", shape_str(cs), ")");
  const Tensor cc = cols.contiguous();
  if (cc.device().is_cuda()) {  // one thread per pixel gathers its entries: every pixel written
    Tensor x = empty(xs, DType::Float32, cc.device());
    cuda::col2im(cc.device().index, xs[0], xs[1], xs[2], xs[3], kh, kw, stride, padding, cc.data<float>(),
                 x.data<float>(), layout == ColumnLayout::BatchInColumns);
    return x;
  }
  Tensor x = zeros(xs);
  detail::col2im_add_cpu(cc.data<float>(), xs, kh, kw, stride, padding, layout, x.data<float>());
  return x;
}

bool conv2d_gpu_applies(const Tensor& x, const Tensor& w, const Tensor& bias) {
  for (const Tensor* t : {&x, &w, &bias})
    if (t->defined() && (t->dtype() != DType::Float32 || !t->device().is_cuda())) return false;
  return true;
}

Tensor conv2d_forward_gpu(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, int64_t stride, int64_t padding) {
  const Shape& xs = x_in.shape();
  const Shape& ws = w_in.shape();
  ENGINE_REQUIRE(ws.size() == 4 && xs.size() == 4 && xs[1] == ws[1], "[conv2d] input ", shape_str(xs),
                 " does not fit weight ", shape_str(ws));
  check_window("conv2d", xs, ws[2], ws[3], stride, padding);
  ENGINE_REQUIRE(conv2d_gpu_applies(x_in, w_in, bias) && x_in.device() == w_in.device() &&
                     (!bias.defined() || bias.device() == w_in.device()),
                 "[conv2d] the GPU path needs float32 tensors on one GPU, got input ", dtype_name(x_in.dtype()), " on ",
                 x_in.device().str(), " and weight ", dtype_name(w_in.dtype()), " on ", w_in.device().str());
  if (bias.defined())
    ENGINE_REQUIRE(bias.shape() == Shape{ws[0]}, "[conv2d] bias must be (", ws[0], ",), got ", shape_str(bias.shape()));
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), b = bias.defined() ? bias.contiguous() : Tensor();
  const int64_t OH = window_out_size(xs[2], ws[2], stride, padding),
                OW = window_out_size(xs[3], ws[3], stride, padding);
  Tensor out = empty({xs[0], ws[0], OH, OW}, DType::Float32, x.device());
  cuda::conv2d_forward(x.device().index, xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], stride, padding,
                       x.data<float>(), w.data<float>(), b.defined() ? b.data<float>() : nullptr, out.data<float>());
  return out;
}

namespace detail {

void im2col_cpu(const float* in, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
                ColumnLayout layout, float* out, int64_t row_stride) {
  if (stride == 1 && columns_avx512()) return im2col_stride1_avx512(in, xs, kh, kw, padding, layout, out, row_stride);
  for_each_window_run(
      xs, kh, kw, stride, padding, layout,
      [&](int64_t col, int64_t len, int64_t lo, int64_t hi, int64_t img) {
        float* o = out + col;
        std::fill(o, o + lo, 0.0f);
        if (stride == 1)
          std::copy(in + img, in + img + (hi - lo), o + lo);
        else
          for (int64_t k = 0; k < hi - lo; ++k) o[lo + k] = in[img + k * stride];
        std::fill(o + hi, o + len, 0.0f);
      },
      row_stride);
}

void col2im_add_cpu(const float* in, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
                    ColumnLayout layout, float* out) {
  if (stride == 1 && columns_avx512()) return col2im_add_stride1_avx512(in, xs, kh, kw, padding, layout, out);
  for_each_window_run(xs, kh, kw, stride, padding, layout,
                      [&](int64_t col, int64_t, int64_t lo, int64_t hi, int64_t img) {
                        float* dst = out + img;
                        const float* src = in + col + lo;
                        if (stride == 1)  // contiguous: the compiler vectorises this one
                          for (int64_t k = 0; k < hi - lo; ++k) dst[k] += src[k];
                        else
                          for (int64_t k = 0; k < hi - lo; ++k) dst[k * stride] += src[k];
                      });
}

}  // namespace detail

namespace {
// 2x2 windows at stride 2 with no padding. Each output compares the window's four values
// in the general loop's order (row by row): the first maximum wins, and the first NaN.
// Where the maximum sits is random, so a branch on each comparison would be mispredicted
// half the time: AVX-512 does 8 outputs at once with masks (without it, the general loop).
// Outputs 0 .. OW-1 of one row, 8 at a time: 2 x 8 floats of each input row (the last
// chunk masked: nothing past the row is read or written), split into the windows' left
// (even) and right (odd) columns. One call per row, so the constants are set up once.
__attribute__((target("avx512f,avx512vl"))) void max_pool_2x2_avx512(const float* r0, const float* r1, int64_t top,
                                                                     int64_t W, int64_t OW, float* out,
                                                                     int64_t* where) {
  const __m512i even = _mm512_setr_epi64(0, 2, 4, 6, 8, 10, 12, 14);
  const __m512i offset[4] = {_mm512_setzero_si512(), _mm512_set1_epi64(1), _mm512_set1_epi64(W),
                             _mm512_set1_epi64(W + 1)};
  for (int64_t ox = 0; ox < OW; ox += 8) {
    const int count = int(std::min<int64_t>(8, OW - ox));
    const __mmask16 in_mask = __mmask16((1u << (2 * count)) - 1);
    const __mmask8 out_mask = __mmask8((1u << count) - 1);
    __m256 best;
    __mmask8 at[4];
    detail::window_maxima(_mm512_maskz_loadu_ps(in_mask, r0 + 2 * ox), _mm512_maskz_loadu_ps(in_mask, r1 + 2 * ox),
                          best, at);
    const __m512i left = _mm512_add_epi64(_mm512_set1_epi64(top + 2 * ox), even);
    __m512i best_at = left;
    for (int k = 1; k < 4; ++k) best_at = _mm512_mask_blend_epi64(at[k], best_at, _mm512_add_epi64(left, offset[k]));
    _mm256_mask_storeu_ps(out + ox, out_mask, best);
    if (where) _mm512_mask_storeu_epi64(where + ox, out_mask, best_at);
  }
}

}  // namespace

namespace detail {
bool max_pool_2x2_vectorised() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512vl");
  return ok;
}

void max_pool_2x2_row(const float* r0, const float* r1, int64_t top, int64_t W, int64_t OW, float* out,
                      int64_t* where) {
  max_pool_2x2_avx512(r0, r1, top, W, OW, out, where);
}
}  // namespace detail

MaxPool max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding) {
  const Shape xs = x.shape();
  check_window("max_pool2d", xs, kernel, kernel, stride, padding);
  ENGINE_REQUIRE(padding * 2 <= kernel, "[max_pool2d] padding ", padding, " must be at most half the kernel ", kernel);
  if (is_half(x.dtype())) {
    MaxPool r = max_pool2d_forward(x.to(DType::Float32), kernel, stride, padding);
    r.out = r.out.to(x.dtype());
    return r;
  }
  require_float("max_pool2d", x);
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t OH = window_out_size(H, kernel, stride, padding), OW = window_out_size(W, kernel, stride, padding);
  const Tensor xc = x.contiguous();
  MaxPool r{empty({N, C, OH, OW}, DType::Float32, x.device()), empty({N, C, OH, OW}, DType::Int64, x.device())};
  if (xc.device().is_cuda()) {
    cuda::max_pool2d_forward(xc.device().index, N * C, H, W, OH, OW, kernel, stride, padding, xc.data<float>(),
                             r.out.data<float>(), r.where.data<int64_t>());
    return r;
  }
  const float* in = xc.data<float>();
  float* o = r.out.data<float>();
  int64_t* arg = r.where.data<int64_t>();
  if (kernel == 2 && stride == 2 && padding == 0 && detail::max_pool_2x2_vectorised()) {  // the common 2x2 pool
    for (int64_t plane = 0; plane < N * C; ++plane)
      for (int64_t oy = 0; oy < OH; ++oy) {
        const int64_t top = (plane * H + 2 * oy) * W, k = (plane * OH + oy) * OW;
        detail::max_pool_2x2_row(in + top, in + top + W, top, W, OW, o + k, arg + k);
      }
    return r;
  }
  for (int64_t plane = 0; plane < N * C; ++plane)
    for (int64_t oy = 0; oy < OH; ++oy) {
      // The window's rows, clipped to the image (padding never wins a max).
      const int64_t y0 = std::max<int64_t>(oy * stride - padding, 0), y1 = std::min(oy * stride - padding + kernel, H);
      for (int64_t ox = 0; ox < OW; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * stride - padding, 0),
                      x1 = std::min(ox * stride - padding + kernel, W);
        int64_t best_at = (plane * H + y0) * W + x0;
        float best = in[best_at];
        for (int64_t y = y0; y < y1; ++y) {
          const float* row = in + (plane * H + y) * W;
          for (int64_t xx = x0; xx < x1; ++xx)  // the first NaN wins, as in PyTorch
            if (row[xx] > best || (row[xx] != row[xx] && best == best)) best = row[xx], best_at = row + xx - in;
        }
        const int64_t k = (plane * OH + oy) * OW + ox;
        o[k] = best;
        arg[k] = best_at;
      }
    }
  return r;
}

Tensor max_pool2d_backward(const Tensor& g, const Tensor& where, const Shape& xs) {
  ENGINE_REQUIRE(g.shape() == where.shape(), "[max_pool2d backward] gradient of shape ", shape_str(g.shape()),
                 " does not match the pooled shape ", shape_str(where.shape()));
  require_same_device("max_pool2d backward", g, "the gradient", where, "the saved indices");
  if (is_half(g.dtype())) return max_pool2d_backward(g.to(DType::Float32), where, xs).to(g.dtype());
  Tensor dx = zeros(xs, DType::Float32, g.device());
  const Tensor gc = g.contiguous();
  if (gc.device().is_cuda()) {
    cuda::max_pool2d_backward(gc.device().index, gc.numel(), gc.data<float>(), where.data<int64_t>(), dx.data<float>());
    return dx;
  }
  float* d = dx.data<float>();
  const float* pg = gc.data<float>();
  const int64_t* arg = where.data<int64_t>();
  for (int64_t k = 0, n = gc.numel(); k < n; ++k) d[arg[k]] += pg[k];
  return dx;
}

namespace {

// One row of the cross-entropy: softmax into probs, the row's loss, and rest = the
// probability of every class but the target's. With m = max(x) and e_j = exp(x_j - m),
// loss = log(sum e) + m - x_t, or log1p(sum_{j != t} e_j) when x_t is the maximum (then
// e_t = 1 and the loss is near 0, where log(1 + small) would lose its digits). An infinite
// maximum takes the first form, whose inf - inf makes the loss NaN, as in PyTorch.
double cross_entropy_row(const float* x, int64_t c, int64_t t, float* probs, float* rest) {
  float m = x[0];
  for (int64_t j = 1; j < c; ++j) m = std::max(m, x[j]);
  double s = 0, others = 0;
  for (int64_t j = 0; j < c; ++j) {
    const double e = std::exp(double(x[j] - m));
    s += e;
    if (j != t) others += e;
  }
  for (int64_t j = 0; j < c; ++j) probs[j] = float(std::exp(double(x[j] - m)) / s);
  *rest = float(others / s);
  return x[t] == m && std::isfinite(m) ? std::log1p(others) : std::log(s) + double(m - x[t]);
}

}  // namespace

CrossEntropy cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index) {
  ENGINE_REQUIRE(logits.dim() == 2, "[cross_entropy] expects logits of shape (N, C), got ", shape_str(logits.shape()));
  require_float("cross_entropy", logits);
  ENGINE_REQUIRE(targets.dtype() == DType::Int64, "[cross_entropy] targets must be int64 class indices, got ",
                 dtype_name(targets.dtype()));
  ENGINE_REQUIRE(targets.dim() == 1 && targets.size(0) == logits.size(0), "[cross_entropy] targets of shape ",
                 shape_str(targets.shape()), " do not match logits of shape ", shape_str(logits.shape()));
  require_same_device("cross_entropy", logits, "the logits", targets, "the targets");
  const int64_t n = logits.size(0), c = logits.size(1);
  ENGINE_REQUIRE(n > 0, "[cross_entropy] got an empty batch");
  const Tensor x = logits.contiguous(), t = targets.contiguous();
  const Device dev = x.device();
  CrossEntropy r{Tensor(), empty({n, c}, DType::Float32, dev), empty({n}, DType::Float32, dev), Tensor(), ignore_index};
  if (dev.is_cuda()) {
    // A bad target is found by the kernel; reading its flag waits for the GPU, which the
    // loss's first use would do anyway. Not while a CUDA graph is captured (nothing may
    // wait then): a replayed step's targets are the caller's to check when it copies them in.
    Tensor rows = empty({n}, DType::Float32, dev), counts = empty({n}, DType::Float32, dev);
    Tensor bad = full({}, -1, DType::Int64, dev);
    cuda::cross_entropy_forward(dev.index, n, c, x.data<float>(), t.data<int64_t>(), ignore_index,
                                r.probs.data<float>(), rows.data<float>(), r.rest.data<float>(), counts.data<float>(),
                                bad.data<int64_t>());
    if (!cuda::is_capturing(dev.index)) {
      const int64_t bad_row = int64_t(bad.item());
      ENGINE_REQUIRE(bad_row < 0, "[cross_entropy] target ", t.at({bad_row}), " at index ", bad_row,
                     " is out of range for ", c, " classes (and is not the ignore_index, ", ignore_index, ")");
    }
    r.counted = sum(counts);
    r.loss = sum(rows) / r.counted;
    return r;
  }
  const float* px = x.data<float>();
  const int64_t* pt = t.data<int64_t>();
  double total = 0;
  int64_t counted = 0;
  for (int64_t i = 0; i < n; ++i) {
    if (pt[i] == ignore_index) {  // a padding row: no loss, no gradient, not in the mean
      r.rest.data<float>()[i] = 0;
      continue;
    }
    ENGINE_REQUIRE(pt[i] >= 0 && pt[i] < c, "[cross_entropy] target ", pt[i], " at index ", i, " is out of range for ",
                   c, " classes (and is not the ignore_index, ", ignore_index, ")");
    total += cross_entropy_row(px + i * c, c, pt[i], r.probs.data<float>() + i * c, r.rest.data<float>() + i);
    ++counted;
  }
  r.counted = scalar_tensor(double(counted));
  r.loss = scalar_tensor(total / double(counted));  // 0 / 0 = NaN when every row is ignored
  return r;
}

Tensor cross_entropy_backward(const CrossEntropy& saved, const Tensor& targets, const Tensor& grad) {
  const int64_t n = saved.probs.size(0), c = saved.probs.size(1);
  const Device dev = saved.probs.device();
  Tensor d = empty({n, c}, DType::Float32, dev);
  const Tensor t = targets.contiguous();
  if (dev.is_cuda()) {
    const Tensor g = grad.to(dev).contiguous();
    cuda::cross_entropy_backward(dev.index, n, c, saved.probs.data<float>(), saved.rest.data<float>(),
                                 t.data<int64_t>(), saved.ignore_index, g.data<float>(), saved.counted.data<float>(),
                                 d.data<float>());
    return d;
  }
  const float scale = float(grad.item()) / float(saved.counted.item());
  const float* p = saved.probs.data<float>();
  const float* rest = saved.rest.data<float>();
  const int64_t* pt = t.data<int64_t>();
  float* pd = d.data<float>();
  for (int64_t i = 0; i < n; ++i) {
    float* row = pd + i * c;
    if (pt[i] == saved.ignore_index) {  // left out of the loss: no gradient
      std::fill(row, row + c, 0.0f);
      continue;
    }
    for (int64_t j = 0; j < c; ++j) row[j] = (j == pt[i] ? -rest[i] : p[i * c + j]) * scale;
  }
  return d;
}

}  // namespace engine
