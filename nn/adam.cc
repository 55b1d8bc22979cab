#include "nn/adam.h"

#include <cmath>

#include "tensor/cuda/kernels.h"
#include "tensor/ops.h"

namespace engine::nn {

Adam::Adam(std::vector<autograd::Variable> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), decoupled ? "AdamW" : "Adam"), options_(options), decoupled_(decoupled),
      exp_avg_(params_.size()), exp_avg_sq_(params_.size()), steps_(params_.size()) {
  ENGINE_REQUIRE(options.lr >= 0, "[", name_, "] learning rate must be >= 0, got ", options.lr);
  ENGINE_REQUIRE(options.beta1 >= 0 && options.beta1 < 1 && options.beta2 >= 0 && options.beta2 < 1, "[", name_,
                 "] betas must be in [0, 1), got (", options.beta1, ", ", options.beta2, ")");
  ENGINE_REQUIRE(options.eps >= 0, "[", name_, "] eps must be >= 0, got ", options.eps);
}

void Adam::step() {
  const AdamOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor& grad = params_[i].grad();
    if (!grad.defined()) continue;
    Tensor p = params_[i].data();
    if (!exp_avg_[i].defined()) {
      exp_avg_[i] = zeros_like(p);
      exp_avg_sq_[i] = zeros_like(p);
      steps_[i] = zeros({}, DType::Int64);
    }
    int64_t& t = steps_[i].data<int64_t>()[0];
    ++t;
    const double bc1 = 1 - std::pow(o.beta1, double(t)), bc2_sqrt = std::sqrt(1 - std::pow(o.beta2, double(t)));
    const double step_size = o.lr / bc1;
    // One fused pass over the parameter: the state update and the step for each element.
    const Tensor g_dense = grad.contiguous();
    float* pp = p.data<float>();
    float* m = exp_avg_[i].data<float>();
    float* v = exp_avg_sq_[i].data<float>();
    const float* g = g_dense.data<float>();
    const float b1 = float(o.beta1), b2 = float(o.beta2), wd = float(o.weight_decay), eps = float(o.eps);
    const float decay = decoupled_ ? float(1 - o.lr * o.weight_decay) : 1.0f;
    if (p.device().is_cuda()) {  // the same rule, one fused kernel (tensor/cuda/optim.cu)
      ENGINE_REQUIRE(g_dense.device() == p.device(), "[Adam] parameter ", i, " is on ", p.device().str(),
                     " but its gradient on ", g_dense.device().str());
      cuda::adam_step(p.device().index, p.numel(), pp, g, m, v,
                      {b1, b2, eps, wd, float(step_size), float(bc2_sqrt), decay, decoupled_});
      continue;
    }
    for (int64_t k = 0, n = p.numel(); k < n; ++k) {
      float gk = g[k];
      if (!decoupled_ && wd != 0) gk += wd * pp[k];
      pp[k] *= decay;
      m[k] = b1 * m[k] + (1 - b1) * gk;
      v[k] = b2 * v[k] + (1 - b2) * gk * gk;
      pp[k] -= float(step_size) * m[k] / (std::sqrt(v[k]) / float(bc2_sqrt) + eps);
    }
  }
}

std::map<std::string, Tensor*> Adam::state_slots() {
  std::map<std::string, Tensor*> s;
  for (size_t i = 0; i < params_.size(); ++i) {
    const std::string k = "state." + std::to_string(i) + ".";
    s[k + "exp_avg"] = &exp_avg_[i];
    s[k + "exp_avg_sq"] = &exp_avg_sq_[i];
    s[k + "step"] = &steps_[i];
  }
  return s;
}

std::map<std::string, double*> Adam::hyperparameters() {
  return {{"lr", &options_.lr}, {"beta1", &options_.beta1}, {"beta2", &options_.beta2}, {"eps", &options_.eps},
          {"weight_decay", &options_.weight_decay}};
}

}  // namespace engine::nn
