// The optimizers' fused updates of nn_ops.h, sgd_step_ and adam_step_: each runs on the
// GPU (tensor/cuda/optim.cu), in AVX-512 (optim_avx512.cc) or in the portable loop here,
// which is the definition the other two match bit for bit.
#include <cmath>
#include <type_traits>

#include "tensor/cpu_features.h"
#include "tensor/cuda/kernels.h"
#include "tensor/nn_ops.h"
#include "tensor/optim_cpu.h"

namespace engine {
namespace {

void require_same_device(const char* optimizer, const Tensor& param, const Tensor& grad) {
  ENGINE_REQUIRE(param.device() == grad.device(), "[", optimizer, "] a parameter is on ", param.device().str(),
                 " but its gradient on ", grad.device().str());
}

}  // namespace

void sgd_step_(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdArgs& a) {
  require_same_device("SGD", param, grad);
  param.storage()->bump_version();
  const Tensor g_dense = grad.contiguous();
  float* buf = a.momentum != 0 ? momentum_buffer->data<float>() : nullptr;
  if (param.device().is_cuda()) {
    cuda::sgd_step(param.device().index, param.numel(), param.data<float>(), g_dense.data<float>(), buf, a);
    return;
  }
  if (cpu_has_avx512()) {
    detail::sgd_avx512(param.numel(), param.data<float>(), g_dense.data<float>(), buf, a);
    return;
  }
  // The choices (momentum? first step? Nesterov?) are made once, outside the loop, so the
  // loop itself is branch-free and the compiler vectorises it.
  float* __restrict pp = param.data<float>();
  const float* __restrict g = g_dense.data<float>();
  float* __restrict b = buf;
  const float lr = a.lr, wd = a.weight_decay, m = a.momentum, damp = 1 - a.dampening;
  const int64_t n = param.numel();
  auto update = [&](auto has_buf, auto is_first, auto nesterov) {
    for (int64_t k = 0; k < n; ++k) {
      float d = g[k] + wd * pp[k];
      if constexpr (decltype(has_buf)::value) {
        const float v = decltype(is_first)::value ? d : m * b[k] + damp * d;
        b[k] = v;
        d = decltype(nesterov)::value ? d + m * v : v;
      }
      pp[k] -= lr * d;
    }
  };
  using T = std::true_type;
  using F = std::false_type;
  if (!b)
    update(F{}, F{}, F{});
  else if (a.first)
    a.nesterov ? update(T{}, T{}, T{}) : update(T{}, T{}, F{});
  else
    a.nesterov ? update(T{}, F{}, T{}) : update(T{}, F{}, F{});
}

void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamArgs& a) {
  require_same_device("Adam", param, grad);
  param.storage()->bump_version();
  const Tensor g_dense = grad.contiguous();
  float* pp = param.data<float>();
  float* m = exp_avg.data<float>();
  float* v = exp_avg_sq.data<float>();
  const float* g = g_dense.data<float>();
  if (param.device().is_cuda()) {
    cuda::adam_step(param.device().index, param.numel(), pp, g, m, v, a);
    return;
  }
  if (cpu_has_avx512()) {
    detail::adam_avx512(param.numel(), pp, g, m, v, a);
    return;
  }
  for (int64_t k = 0, n = param.numel(); k < n; ++k) {
    float gk = g[k];
    if (!a.decoupled && a.weight_decay != 0) gk += a.weight_decay * pp[k];
    pp[k] *= a.decay;
    m[k] = a.beta1 * m[k] + (1 - a.beta1) * gk;
    v[k] = a.beta2 * v[k] + (1 - a.beta2) * gk * gk;
    pp[k] -= a.step_size * m[k] / (std::sqrt(v[k]) / a.bias_correction2_sqrt + a.eps);
  }
}

}  // namespace engine
