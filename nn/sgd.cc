#include "nn/sgd.h"

#include <type_traits>

#include "tensor/cuda/kernels.h"
#include "tensor/ops.h"

namespace engine::nn {

SGD::SGD(std::vector<autograd::Variable> params, SGDOptions options)
    : Optimizer(std::move(params), "SGD"), buffers_(params_.size()), options_(options) {
  ENGINE_REQUIRE(options.lr >= 0, "[SGD] learning rate must be >= 0, got ", options.lr);
  ENGINE_REQUIRE(options.momentum >= 0, "[SGD] momentum must be >= 0, got ", options.momentum);
  ENGINE_REQUIRE(!options.nesterov || (options.momentum > 0 && options.dampening == 0),
                 "[SGD] Nesterov momentum needs momentum > 0 and dampening = 0");
}

void SGD::step() {
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = params_[i].grad();
    if (!grad.defined()) continue;  // no gradient this step: leave it alone, as PyTorch does
    Tensor p = params_[i].data();
    const Tensor g_dense = grad.contiguous();
    const bool first = o.momentum != 0 && !buffers_[i].defined();
    if (o.momentum != 0 && first) buffers_[i] = empty(p.shape(), DType::Float32, p.device());
    if (p.device().is_cuda()) {  // the same rule, one fused kernel (tensor/cuda/optim.cu)
      ENGINE_REQUIRE(g_dense.device() == p.device(), "[SGD] parameter ", i, " is on ", p.device().str(),
                     " but its gradient on ", g_dense.device().str());
      cuda::sgd_step(p.device().index, p.numel(), p.data<float>(), g_dense.data<float>(),
                     o.momentum != 0 ? buffers_[i].data<float>() : nullptr,
                     {float(o.lr), float(o.weight_decay), float(o.momentum), float(o.dampening), o.nesterov, first});
      continue;
    }
    // One pass per parameter: the whole update rule (see sgd.h) for each element in turn.
    // The choices (momentum? first step? Nesterov?) are made once, outside the loop, so
    // the loop itself is branch-free and the compiler vectorises it.
    float* __restrict pp = p.data<float>();
    const float* __restrict g = g_dense.data<float>();
    float* __restrict buf = o.momentum != 0 ? buffers_[i].data<float>() : nullptr;
    const float lr = float(o.lr), wd = float(o.weight_decay), m = float(o.momentum), damp = float(1 - o.dampening);
    const int64_t n = p.numel();
    auto update = [&](auto has_buf, auto is_first, auto nesterov) {
      for (int64_t k = 0; k < n; ++k) {
        float d = g[k] + wd * pp[k];
        if constexpr (decltype(has_buf)::value) {
          const float b = decltype(is_first)::value ? d : m * buf[k] + damp * d;
          buf[k] = b;
          d = decltype(nesterov)::value ? d + m * b : b;
        }
        pp[k] -= lr * d;
      }
    };
    using T = std::true_type;
    using F = std::false_type;
    if (!buf) update(F{}, F{}, F{});
    else if (first) o.nesterov ? update(T{}, T{}, T{}) : update(T{}, T{}, F{});
    else o.nesterov ? update(T{}, F{}, T{}) : update(T{}, F{}, F{});
  }
}

std::map<std::string, Tensor*> SGD::state_slots() {
  std::map<std::string, Tensor*> s;
  for (size_t i = 0; i < buffers_.size(); ++i) s["state." + std::to_string(i) + ".momentum_buffer"] = &buffers_[i];
  return s;
}

std::map<std::string, double*> SGD::hyperparameters() {
  return {{"lr", &options_.lr}, {"momentum", &options_.momentum}, {"dampening", &options_.dampening},
          {"weight_decay", &options_.weight_decay}};
}

}  // namespace engine::nn
