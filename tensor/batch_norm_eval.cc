// Batch normalisation in evaluation mode on the CPU (nn_ops.h): with the running
// statistics fixed, each channel is one affine map, y = x scale + shift, so the layer (and
// a ReLU, and a 2x2 max-pool after it) is one pass over the activations. Written as the
// layer's formula, (x - mean) / sqrt(var + eps) * weight + bias, it was four broadcast
// passes, each writing a temporary as large as x, then a ReLU and a pool: at the
// evaluation's batch of 1000 images the CNN's first temporaries are 100 MB each.
#include <cmath>

#include "tensor/batch_norm_cpu.h"
#include "tensor/nn_ops.h"

namespace engine {

Tensor batch_norm_eval_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                               const Tensor& weight, const Tensor& bias, double eps, bool relu, bool pool2) {
  ENGINE_REQUIRE(x.dim() >= 2 && x.dtype() == DType::Float32 && x.is_contiguous() && !x.device().is_cuda(),
                 "[batch_norm eval] needs a contiguous float32 CPU tensor of 2 or more dims, got ",
                 shape_str(x.shape()), " ", dtype_name(x.dtype()), " on ", x.device().str());
  const int64_t N = x.size(0), C = x.size(1), S = x.numel() / std::max<int64_t>(N * C, 1);
  for (const Tensor* t : {&running_mean, &running_var, &weight, &bias})
    ENGINE_REQUIRE(t->numel() == C && t->dtype() == DType::Float32 && !t->device().is_cuda(),
                   "[batch_norm eval] the running statistics, weight and bias need ", C,
                   " float32 values on the CPU, got ", shape_str(t->shape()), " ", dtype_name(t->dtype()));
  ENGINE_REQUIRE(!pool2 || (relu && batch_norm_relu_pool2_applies(x)), "[batch_norm eval] the fused 2x2 pool needs ",
                 "relu, a (N, C, H, W) input with H, W >= 2 and AVX-512VL, got ", shape_str(x.shape()));
  const Tensor rm = running_mean.contiguous(), rv = running_var.contiguous(), w = weight.contiguous(),
               b = bias.contiguous();
  const int64_t H = pool2 ? x.size(2) : 0, W = pool2 ? x.size(3) : 0, OS = pool2 ? (H / 2) * (W / 2) : S;
  Shape out_shape = x.shape();
  if (pool2) out_shape[2] = H / 2, out_shape[3] = W / 2;
  Tensor out = empty(out_shape);
  for (int64_t c = 0; c < C; ++c) {
    // As the training forward forms them (channel_statistics): 1/sqrt in double, then float.
    const float invstd = float(1 / std::sqrt(double(rv.data<float>()[c]) + eps));
    const float scale = invstd * w.data<float>()[c], shift = b.data<float>()[c] - rm.data<float>()[c] * scale;
    for (int64_t n = 0; n < N; ++n) {
      const float* row = x.data<float>() + (n * C + c) * S;
      float* dst = out.data<float>() + (n * C + c) * OS;
      if (pool2)
        detail::relu_pool2_plane_avx512(H, W, row, scale, shift, dst);
      else
        detail::normalise_row(S, row, scale, shift, relu, dst);
    }
  }
  return out;
}

}  // namespace engine
