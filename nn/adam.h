// Adam and AdamW, with PyTorch's update rules. For each parameter p with gradient g:
//
//   Adam:   g = g + weight_decay * p                 (L2 penalty folded into the gradient)
//   AdamW:  p = p * (1 - lr * weight_decay)          (decoupled weight decay)
//   m = beta1 m + (1 - beta1) g;   v = beta2 v + (1 - beta2) g^2;   t = t + 1
//   p = p - lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
//
//   Adam opt(model.parameters(), {.lr = 1e-3});
//   AdamW optw(model.parameters(), {.lr = 1e-3, .weight_decay = 0.01});
#pragma once

#include "nn/optimizer.h"

namespace engine::nn {

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
};

class Adam : public Optimizer {
 public:
  Adam(std::vector<autograd::Variable> params, AdamOptions options, bool decoupled_weight_decay = false);
  void step() override;
  AdamOptions& options() { return options_; }

 protected:
  std::map<std::string, Tensor*> state_slots() override;
  std::map<std::string, double*> hyperparameters() override;
  void check_options() const override;
  void check_state(const std::string& name, const std::string& key, const Tensor& value) const override;

 private:
  AdamOptions options_;
  bool decoupled_;
  std::vector<Tensor> exp_avg_, exp_avg_sq_, steps_;  // steps_: int64 scalars, as PyTorch's "step"
};

class AdamW : public Adam {
 public:
  // PyTorch's AdamW default weight decay is 0.01.
  AdamW(std::vector<autograd::Variable> params, AdamOptions options = {.weight_decay = 0.01})
      : Adam(std::move(params), options, /*decoupled_weight_decay=*/true) {}
};

}  // namespace engine::nn
