#include "nn/adam.h"

#include <cmath>

#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine::nn {

Adam::Adam(std::vector<autograd::Variable> params, AdamOptions options, bool decoupled)
    : Optimizer(std::move(params), decoupled ? "AdamW" : "Adam"),
      options_(options),
      decoupled_(decoupled),
      exp_avg_(params_.size()),
      exp_avg_sq_(params_.size()),
      steps_(params_.size()) {
  check_options();
}

void Adam::check_options() const {
  const AdamOptions& o = options_;
  require_in("learning rate", o.lr, 0, 1e6);
  ENGINE_REQUIRE(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, "[", name_,
                 "] betas must be in [0, 1), got (", o.beta1, ", ", o.beta2, ")");
  require_in("eps", o.eps, 0, 1e6);
  require_in("weight_decay", o.weight_decay, 0, 1e6);
}

void Adam::step() {
  const AdamOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor* grad = grad_to_step(i);
    if (!grad) continue;
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
    // The state update and the step for each element, in one pass (tensor/nn_ops.cc).
    const float decay = decoupled_ ? float(1 - o.lr * o.weight_decay) : 1.0f;
    adam_step_(p, *grad, exp_avg_[i], exp_avg_sq_[i],
               {float(o.beta1), float(o.beta2), float(o.eps), float(o.weight_decay), float(step_size), float(bc2_sqrt),
                decay, decoupled_});
  }
}

// A mean of squares is never negative; the square root in the step would make it NaN.
void Adam::check_state(const std::string& name, const std::string& key, const Tensor& value) const {
  if (name != "exp_avg_sq" || value.numel() == 0) return;
  const double lowest = min(value).item();
  ENGINE_REQUIRE(!(lowest < 0), "[", name_, ".load_state_dict] \"", key, "\" holds ", lowest,
                 ": a running mean of squared gradients is never negative (the file is not a state this optimizer "
                 "saved)");
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
  return {{"lr", &options_.lr},
          {"beta1", &options_.beta1},
          {"beta2", &options_.beta2},
          {"eps", &options_.eps},
          {"weight_decay", &options_.weight_decay}};
}

}  // namespace engine::nn
