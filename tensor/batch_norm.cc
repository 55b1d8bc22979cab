// Batch normalisation in training mode on the CPU (nn_ops.h): the per-channel loops.
// The data are (N, C, S) with S the product of the spatial dims: channel c's values are N
// contiguous runs of S floats, so every inner loop is a contiguous, vectorisable one.
//
// Fused with what follows it in a CNN: ReLU (relu = true), and ReLU then a 2x2 max-pool
// at stride 2 (batch_norm_relu_pool2_*): the normalised activations are then never
// written out, only made and pooled in registers, and the backward rebuilds each
// image's dense gradient from the pooled one, finding each window's maximum again from x,
// as max_pool2d_backward and relu_backward would have made it, so every value and sum is
// the one of the separate ops.
#include <cmath>
#include <vector>

#include "tensor/batch_norm_cpu.h"
#include "tensor/check.h"
#include "tensor/lane_sum.h"
#include "tensor/max_pool_cpu.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine {

namespace {

struct Layout {
  int64_t N, C, S;
};

Layout layout_of(const Tensor& x) {
  ENGINE_REQUIRE(x.dim() >= 2 && x.dtype() == DType::Float32 && x.is_contiguous() && !x.device().is_cuda(),
                 "[batch_norm] needs a contiguous float32 CPU tensor of 2 or more dims, got ", shape_str(x.shape()),
                 " ", dtype_name(x.dtype()), " on ", x.device().str());
  int64_t S = 1;
  for (int64_t d = 2; d < x.dim(); ++d) S *= x.size(d);
  return {x.size(0), x.size(1), S};
}

// y = x scale + shift: forward and backward (which recomputes relu's input from x) share
// this one expression, so the two agree to the bit on where y <= 0.
inline float affine(float x, float scale, float shift) { return x * scale + shift; }
// relu's rule (elementwise.cc): y where !(y <= 0), so NaN passes, as in PyTorch.
inline bool relu_passes(float y) { return !(y <= 0); }

// out = dy where relu's input x scale + shift passed, else 0 (restrict: so it vectorises).
void relu_mask(int64_t S, const float* __restrict x, const float* __restrict dy, float scale, float shift,
               float* __restrict out) {
  for (int64_t i = 0; i < S; ++i) {
    const float d = dy[i];  // read unconditionally, so the select needs no branch
    out[i] = relu_passes(affine(x[i], scale, shift)) ? d : 0.0f;
  }
}

// out = relu(x scale + shift), or without relu the affine map alone.
void normalise_row(int64_t S, const float* __restrict x, float scale, float shift, bool relu, float* __restrict out) {
  if (detail::batch_norm_avx512())
    detail::normalise_row_avx512(S, x, scale, shift, relu, out);
  else if (relu)
    for (int64_t i = 0; i < S; ++i) {
      const float y = affine(x[i], scale, shift);
      out[i] = relu_passes(y) ? y : 0.0f;
    }
  else
    for (int64_t i = 0; i < S; ++i) out[i] = affine(x[i], scale, shift);
}

void check_params(const Layout& L, const Tensor& weight, const Tensor& bias) {
  ENGINE_REQUIRE(weight.numel() == L.C && bias.numel() == L.C, "[batch_norm] weight and bias need ", L.C,
                 " values, got ", weight.numel(), " and ", bias.numel());
}

// Asks for [p, p + bytes) to be brought into cache ahead of use: the loops here go channel
// by channel, jumping C S floats from one image's row to the next, and the hardware's
// prefetchers only pick up each new row some way into it.
void prefetch(const void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<const char*>(p) + o);
}

// The same for lines about to be written: a store that misses waits for its line as a
// load would.
void prefetch_for_write(void* p, int64_t bytes) {
  for (int64_t o = 0; o < bytes; o += 64) __builtin_prefetch(static_cast<char*>(p) + o, /*rw=*/1);
}

// A channel's y = (x - mean) / sqrt(var + eps) weight + bias as y = x scale + shift (the
// inverse square root in double), in training from the batch's statistics, in evaluation
// from the running ones.
struct ChannelMap {
  float invstd, scale, shift;
};
ChannelMap channel_map(float mean, double var, float weight, float bias, double eps) {
  const float invstd = float(1 / std::sqrt(var + eps)), scale = invstd * weight;
  return {invstd, scale, bias - mean * scale};
}

// Channel c's statistics (mean, then the variance around it: two passes, no cancellation)
// into r.mean/var/invstd/scale/shift[c].
void channel_statistics(const Layout& L, const float* px, int64_t c, float weight, float bias, double eps,
                        BatchNormTrain& r) {
  const double M = double(L.N * L.S);
  double sum = 0;
  for (int64_t n = 0; n < L.N; ++n) {
    const float* row = px + (n * L.C + c) * L.S;
    if (n + 1 < L.N) prefetch(row + L.C * L.S, L.S * 4);  // the next image's row
    sum += detail::batch_norm_avx512() ? detail::sum_avx512(L.S, row)
                                       : detail::lane_sum(L.S, [row](int64_t i) { return row[i]; });
  }
  const float mean = float(sum / M);
  double sq = 0;
  for (int64_t n = 0; n < L.N; ++n) {
    const float* row = px + (n * L.C + c) * L.S;
    sq += detail::batch_norm_avx512()
              ? detail::squared_deviations_avx512(L.S, row, mean)
              : detail::lane_sum(L.S, [row, mean](int64_t i) { return (row[i] - mean) * (row[i] - mean); });
  }
  const double var = sq / M;
  const ChannelMap map = channel_map(mean, var, weight, bias, eps);
  r.mean.data<float>()[c] = mean;
  r.var.data<float>()[c] = float(var);
  r.invstd.data<float>()[c] = map.invstd;
  r.scale.data<float>()[c] = map.scale;
  r.shift.data<float>()[c] = map.shift;
}

BatchNormTrain saved_for(const Layout& L, bool relu) {
  return {Tensor(), empty({L.C}), empty({L.C}), empty({L.C}), empty({L.C}), empty({L.C}), relu};
}

using detail::RowSums;

// One row's two sums for the backward: sum d and sum d (x - mean), in one pass, each
// exactly as lane_sum adds it (16 float lanes, the tail and the lanes in double).
RowSums row_sums(int64_t S, const float* __restrict d, const float* __restrict x, float mean) {
  if (detail::batch_norm_avx512()) return detail::row_sums_avx512(S, d, x, mean);
  float a[16] = {}, b[16] = {};
  int64_t i = 0;
  for (; i + 16 <= S; i += 16)
    for (int k = 0; k < 16; ++k) {
      a[k] += d[i + k];
      b[k] += d[i + k] * (x[i + k] - mean);
    }
  RowSums r;
  for (; i < S; ++i) {
    r.dy += d[i];
    r.dy_xc += d[i] * (x[i] - mean);
  }
  for (int k = 0; k < 16; ++k) {
    r.dy += a[k];
    r.dy_xc += b[k];
  }
  return r;
}

// The backward, channel by channel, given dy_row(n, c, out): image n's gradient of channel
// c (S floats), after the fused ReLU's mask if there is one: dy itself, or written into
// `out` (dx's own row, which the last loop then overwrites in place) and returned.
template <class DyRow>
BatchNormGrads backward_channels(const Layout& L, const Tensor& x, const BatchNormTrain& saved, const Tensor& weight,
                                 DyRow dy_row) {
  const Tensor w = weight.contiguous();
  BatchNormGrads g{empty(x.shape()), empty({L.C}), empty({L.C})};
  const float *px = x.data<float>(), *pw = w.data<float>();
  float* pdx = g.dx.data<float>();
  const double M = double(L.N * L.S);
  std::vector<const float*> dy(size_t(L.N));
  for (int64_t c = 0; c < L.C; ++c) {
    const float mean = saved.mean.data<float>()[c], invstd = saved.invstd.data<float>()[c];
    double sum_dy = 0, sum_dy_xc = 0;  // sum dy, sum dy (x - mean)
    auto add_sums = [&](int64_t n) {
      const RowSums r = row_sums(L.S, dy[size_t(n)], px + (n * L.C + c) * L.S, mean);
      sum_dy += r.dy;
      sum_dy_xc += r.dy_xc;
    };
    // Each row is summed one row after it is made, while still in L1, but with its stores
    // done: a load that overlaps stores still in flight waits for them.
    for (int64_t n = 0; n < L.N; ++n) {
      dy[size_t(n)] = dy_row(n, c, pdx + (n * L.C + c) * L.S);
      if (n > 0) add_sums(n - 1);
    }
    if (L.N > 0) add_sums(L.N - 1);
    const double dbias = sum_dy, dweight = sum_dy_xc * invstd;
    // dx = k (dy - dbias/M - (x - mean) invstd dweight/M), k = weight invstd
    const float k = pw[c] * invstd, mean_dy = float(dbias / M), slope = float(dweight / M * invstd);
    for (int64_t n = 0; n < L.N; ++n) {
      float* out = pdx + (n * L.C + c) * L.S;
      const float *row = px + (n * L.C + c) * L.S, *d = dy[size_t(n)];
      if (detail::batch_norm_avx512()) {
        detail::batch_norm_dx_avx512(L.S, d, row, mean, k, mean_dy, slope, out);
        continue;
      }
      for (int64_t i = 0; i < L.S; ++i) out[i] = k * (d[i] - mean_dy - (row[i] - mean) * slope);  // d may be out
    }
    g.dweight.data<float>()[c] = float(dweight);
    g.dbias.data<float>()[c] = float(dbias);
  }
  return g;
}

}  // namespace

BatchNormTrain batch_norm_train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                        bool relu) {
  const Layout L = layout_of(x);
  check_params(L, weight, bias);
  BatchNormTrain r = saved_for(L, relu);
  r.out = empty(x.shape());
  const Tensor w = weight.contiguous(), b = bias.contiguous();
  const float* px = x.data<float>();
  for (int64_t c = 0; c < L.C; ++c) {
    channel_statistics(L, px, c, w.data<float>()[c], b.data<float>()[c], eps, r);
    const float scale = r.scale.data<float>()[c], shift = r.shift.data<float>()[c];
    for (int64_t n = 0; n < L.N; ++n) {
      const int64_t at = (n * L.C + c) * L.S;
      normalise_row(L.S, px + at, scale, shift, relu, r.out.data<float>() + at);
    }
  }
  return r;
}

BatchNormGrads batch_norm_train_backward(const Tensor& dy_in, const Tensor& x, const BatchNormTrain& saved,
                                         const Tensor& weight) {
  const Layout L = layout_of(x);
  const Tensor dy = dy_in.contiguous();
  ENGINE_REQUIRE(dy.shape() == x.shape(), "[batch_norm backward] gradient of shape ", shape_str(dy.shape()),
                 " for input ", shape_str(x.shape()));
  const float *pdy = dy.data<float>(), *px = x.data<float>();
  return backward_channels(L, x, saved, weight, [&](int64_t n, int64_t c, float* out) {
    const int64_t at = (n * L.C + c) * L.S;
    if (!saved.relu) return pdy + at;
    relu_mask(L.S, px + at, pdy + at, saved.scale.data<float>()[c], saved.shift.data<float>()[c], out);
    return static_cast<const float*>(out);
  });
}

bool batch_norm_relu_pool2_applies(const Tensor& x) {
  return detail::max_pool_2x2_vectorised() && x.dim() == 4 && x.size(2) >= 2 && x.size(3) >= 2 &&
         x.dtype() == DType::Float32 && !x.device().is_cuda();
}

BatchNormReluPool batch_norm_relu_pool2_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps) {
  ENGINE_REQUIRE(batch_norm_relu_pool2_applies(x), "[batch_norm_relu_pool2] needs a float32 CPU input (N, C, H, W) ",
                 "with H, W >= 2 and AVX-512VL, got ", shape_str(x.shape()));
  const Layout L = layout_of(x);
  check_params(L, weight, bias);
  const int64_t H = x.size(2), W = x.size(3), OH = H / 2, OW = W / 2;
  BatchNormReluPool r{saved_for(L, /*relu=*/true), empty({L.N, L.C, OH, OW})};
  const Tensor w = weight.contiguous(), b = bias.contiguous();
  const float* px = x.data<float>();
  for (int64_t c = 0; c < L.C; ++c) {
    channel_statistics(L, px, c, w.data<float>()[c], b.data<float>()[c], eps, r.bn);
    const float scale = r.bn.scale.data<float>()[c], shift = r.bn.shift.data<float>()[c];
    for (int64_t n = 0; n < L.N; ++n)
      detail::relu_pool2_plane_avx512(H, W, px + (n * L.C + c) * L.S, scale, shift,
                                      r.out.data<float>() + (n * L.C + c) * OH * OW);
  }
  return r;
}

// Evaluation: with the running statistics fixed, each channel is one affine map, so the
// layer (and a ReLU, and a 2x2 pool after it) is one pass. Written as the layer's formula
// it was four broadcast passes, each writing a temporary as large as x, then a ReLU and a
// pool: at the trainer's evaluation batch of 1000 images the CNN's first ones are 100 MB.
Tensor batch_norm_eval_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                               const Tensor& weight, const Tensor& bias, double eps, bool relu, bool pool2) {
  const Layout L = layout_of(x);
  check_params(L, weight, bias);
  ENGINE_REQUIRE(running_mean.numel() == L.C && running_var.numel() == L.C && running_mean.dtype() == DType::Float32 &&
                     running_var.dtype() == DType::Float32,
                 "[batch_norm] the running statistics need ", L.C, " float32 values, got ", running_mean.numel(),
                 " and ", running_var.numel());
  ENGINE_REQUIRE(!pool2 || (relu && batch_norm_relu_pool2_applies(x)), "[batch_norm eval] the fused 2x2 pool needs ",
                 "relu, a (N, C, H, W) input with H, W >= 2 and AVX-512VL, got ", shape_str(x.shape()));
  const Tensor rm = running_mean.contiguous(), rv = running_var.contiguous(), w = weight.contiguous(),
               b = bias.contiguous();
  const int64_t H = pool2 ? x.size(2) : 0, W = pool2 ? x.size(3) : 0, OS = pool2 ? (H / 2) * (W / 2) : L.S;
  Shape out_shape = x.shape();
  if (pool2) out_shape[2] = H / 2, out_shape[3] = W / 2;
  Tensor out = empty(out_shape);
  for (int64_t c = 0; c < L.C; ++c) {
    const ChannelMap map =
        channel_map(rm.data<float>()[c], rv.data<float>()[c], w.data<float>()[c], b.data<float>()[c], eps);
    for (int64_t n = 0; n < L.N; ++n) {
      const float* row = x.data<float>() + (n * L.C + c) * L.S;
      float* dst = out.data<float>() + (n * L.C + c) * OS;
      if (pool2)
        detail::relu_pool2_plane_avx512(H, W, row, map.scale, map.shift, dst);
      else
        normalise_row(L.S, row, map.scale, map.shift, relu, dst);
    }
  }
  return out;
}

namespace {
// Without AVX-512: the plane's gradient window by window, by the same rules as
// relu_pool2_grad_plane_avx512 (batch_norm_cpu.h).
void relu_pool2_grad_plane(int64_t H, int64_t W, const float* g, const float* x, float scale, float shift, float* out) {
  std::fill(out, out + H * W, 0.0f);
  for (int64_t oy = 0; oy < H / 2; ++oy)
    for (int64_t ox = 0; ox < W / 2; ++ox) {
      const int64_t at[4] = {2 * oy * W + 2 * ox, 2 * oy * W + 2 * ox + 1, (2 * oy + 1) * W + 2 * ox,
                             (2 * oy + 1) * W + 2 * ox + 1};
      float v[4];
      for (int k = 0; k < 4; ++k) {
        const float y = affine(x[at[k]], scale, shift);
        v[k] = relu_passes(y) ? y : 0.0f;
      }
      int best = 0;  // max_pool2d's rule: the first maximum, and the first NaN
      for (int k = 1; k < 4; ++k)
        if (v[k] > v[best] || (std::isnan(v[k]) && !std::isnan(v[best]))) best = k;
      if (relu_passes(affine(x[at[best]], scale, shift))) out[at[best]] = 0.0f + g[oy * (W / 2) + ox];
    }
}
}  // namespace

BatchNormGrads batch_norm_relu_pool2_backward(const Tensor& g_pooled, const Tensor& x, const BatchNormTrain& saved,
                                              const Tensor& weight) {
  const Layout L = layout_of(x);
  const Tensor g = g_pooled.contiguous();
  ENGINE_REQUIRE(x.dim() == 4 && g.shape() == Shape({L.N, L.C, x.size(2) / 2, x.size(3) / 2}),
                 "[batch_norm_relu_pool2 backward] gradient of shape ", shape_str(g.shape()), " for input ",
                 shape_str(x.shape()));
  const int64_t pooled = g.numel() / std::max<int64_t>(1, L.N * L.C);
  const float *pg = g.data<float>(), *px = x.data<float>();
  // Image n's channel c as max_pool2d_backward then relu_backward make it: zeros, plus each
  // window's gradient at its maximum where relu's input there passed; 0 + g, as the
  // separate ops add it (so -0 becomes +0). The maximum is found again from x.
  return backward_channels(L, x, saved, weight, [&](int64_t n, int64_t c, float* out) {
    const int64_t plane = n * L.C + c;
    const float scale = saved.scale.data<float>()[c], shift = saved.shift.data<float>()[c];
    if (n + 1 < L.N) {  // the next image's plane, C planes further on
      prefetch(px + (plane + L.C) * L.S, L.S * 4);
      prefetch(pg + (plane + L.C) * pooled, pooled * 4);
      prefetch_for_write(out + L.C * L.S, L.S * 4);  // its gradient plane: stores that miss wait for the line
    }
    if (detail::batch_norm_avx512())
      detail::relu_pool2_grad_plane_avx512(x.size(2), x.size(3), pg + plane * pooled, px + plane * L.S, scale, shift,
                                           out);
    else
      relu_pool2_grad_plane(x.size(2), x.size(3), pg + plane * pooled, px + plane * L.S, scale, shift, out);
    return static_cast<const float*>(out);
  });
}

}  // namespace engine
