// Batch normalisation in training mode on the CPU (nn_ops.h): the per-channel loops.
// The data are (N, C, S) with S the product of the spatial dims: channel c's values are N
// contiguous runs of S floats, so every inner loop is a contiguous, vectorisable one.
#include <cmath>
#include <vector>

#include "tensor/check.h"
#include "tensor/lane_sum.h"
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

}  // namespace

BatchNormTrain batch_norm_train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                        bool relu) {
  const Layout L = layout_of(x);
  ENGINE_REQUIRE(weight.numel() == L.C && bias.numel() == L.C, "[batch_norm] weight and bias need ", L.C,
                 " values, got ", weight.numel(), " and ", bias.numel());
  BatchNormTrain r{empty(x.shape()), empty({L.C}), empty({L.C}), empty({L.C}), empty({L.C}), empty({L.C}), relu};
  const Tensor w = weight.contiguous(), b = bias.contiguous();
  const float *px = x.data<float>(), *pw = w.data<float>(), *pb = b.data<float>();
  float* py = r.out.data<float>();
  const double M = double(L.N * L.S);
  for (int64_t c = 0; c < L.C; ++c) {
    double sum = 0;
    for (int64_t n = 0; n < L.N; ++n) {
      const float* row = px + (n * L.C + c) * L.S;
      sum += detail::lane_sum(L.S, [row](int64_t i) { return row[i]; });
    }
    const float mean = float(sum / M);
    double sq = 0;
    for (int64_t n = 0; n < L.N; ++n) {
      const float* row = px + (n * L.C + c) * L.S;
      sq += detail::lane_sum(L.S, [row, mean](int64_t i) { return (row[i] - mean) * (row[i] - mean); });
    }
    const double var = sq / M;
    const float invstd = float(1 / std::sqrt(var + eps));
    const float scale = invstd * pw[c], shift = pb[c] - mean * scale;  // y = x scale + shift
    for (int64_t n = 0; n < L.N; ++n) {
      const float* row = px + (n * L.C + c) * L.S;
      float* out = py + (n * L.C + c) * L.S;
      if (relu)
        for (int64_t i = 0; i < L.S; ++i) {
          const float y = affine(row[i], scale, shift);
          out[i] = relu_passes(y) ? y : 0.0f;
        }
      else
        for (int64_t i = 0; i < L.S; ++i) out[i] = affine(row[i], scale, shift);
    }
    r.scale.data<float>()[c] = scale;
    r.shift.data<float>()[c] = shift;
    r.mean.data<float>()[c] = mean;
    r.var.data<float>()[c] = float(var);
    r.invstd.data<float>()[c] = invstd;
  }
  return r;
}

BatchNormGrads batch_norm_train_backward(const Tensor& dy_in, const Tensor& x, const BatchNormTrain& saved,
                                         const Tensor& weight) {
  const Layout L = layout_of(x);
  const Tensor dy = dy_in.contiguous(), w = weight.contiguous();
  ENGINE_REQUIRE(dy.shape() == x.shape(), "[batch_norm backward] gradient of shape ", shape_str(dy.shape()),
                 " for input ", shape_str(x.shape()));
  BatchNormGrads g{empty(x.shape()), empty({L.C}), empty({L.C})};
  const float *px = x.data<float>(), *pdy = dy.data<float>(), *pw = w.data<float>();
  float* pdx = g.dx.data<float>();
  const double M = double(L.N * L.S);
  std::vector<float> masked(saved.relu ? size_t(L.S) : 0);
  for (int64_t c = 0; c < L.C; ++c) {
    const float mean = saved.mean.data<float>()[c], invstd = saved.invstd.data<float>()[c];
    const float scale = saved.scale.data<float>()[c], shift = saved.shift.data<float>()[c];
    // dy, or with a fused ReLU dy where relu's input passed (relu_backward's rule), masked
    // one row at a time into `masked` so that the loops below stay plain and vectorised.
    auto grad_row = [&](int64_t n) {
      const float *row = px + (n * L.C + c) * L.S, *d = pdy + (n * L.C + c) * L.S;
      if (!saved.relu) return d;
      relu_mask(L.S, row, d, scale, shift, masked.data());
      return static_cast<const float*>(masked.data());
    };
    double sum_dy = 0, sum_dy_xc = 0;  // sum dy, sum dy (x - mean)
    for (int64_t n = 0; n < L.N; ++n) {
      const float *row = px + (n * L.C + c) * L.S, *d = grad_row(n);
      sum_dy += detail::lane_sum(L.S, [d](int64_t i) { return d[i]; });
      sum_dy_xc += detail::lane_sum(L.S, [d, row, mean](int64_t i) { return d[i] * (row[i] - mean); });
    }
    const double dbias = sum_dy, dweight = sum_dy_xc * invstd;
    // dx = k (dy - dbias/M - (x - mean) invstd dweight/M), k = weight invstd
    const float k = pw[c] * invstd, mean_dy = float(dbias / M), slope = float(dweight / M * invstd);
    for (int64_t n = 0; n < L.N; ++n) {
      const float *row = px + (n * L.C + c) * L.S, *d = grad_row(n);
      float* out = pdx + (n * L.C + c) * L.S;
      for (int64_t i = 0; i < L.S; ++i) out[i] = k * (d[i] - mean_dy - (row[i] - mean) * slope);
    }
    g.dweight.data<float>()[c] = float(dweight);
    g.dbias.data<float>()[c] = float(dbias);
  }
  return g;
}

}  // namespace engine
