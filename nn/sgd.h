// Stochastic gradient descent with momentum, Nesterov momentum and weight decay, with
// PyTorch's exact update rule:
//
//   g = grad + weight_decay * p
//   buf = momentum * buf + (1 - dampening) * g      (buf = g on the first step)
//   g = nesterov ? g + momentum * buf : buf          (when momentum != 0)
//   p = p - lr * g
//
//   SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
//   opt.zero_grad(); loss.backward(); opt.step();
#pragma once

#include "nn/optimizer.h"

namespace engine::nn {

struct SGDOptions {
  double lr = 0.01;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
};

class SGD : public Optimizer {
 public:
  SGD(std::vector<autograd::Variable> params, SGDOptions options);
  // Updates every parameter that has a gradient, in place (views of it stay valid).
  void step() override;
  SGDOptions& options() { return options_; }
  // The momentum buffer of parameter i (undefined before its first step).
  const Tensor& momentum_buffer(size_t i) const { return buffers_.at(i); }

 protected:
  std::map<std::string, Tensor*> state_slots() override;
  std::map<std::string, double*> hyperparameters() override;
  void check_options() const override;

 private:
  std::vector<Tensor> buffers_;
  SGDOptions options_;
};

}  // namespace engine::nn
