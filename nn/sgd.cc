#include "nn/sgd.h"

#include "tensor/nn_ops.h"
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
    const bool first = o.momentum != 0 && !buffers_[i].defined();
    if (first) buffers_[i] = empty(p.shape(), DType::Float32, p.device());
    // The whole update rule (see sgd.h) in one pass over the parameter (tensor/nn_ops.cc).
    sgd_step_(p, grad, &buffers_[i],
              {float(o.lr), float(o.weight_decay), float(o.momentum), float(o.dampening), o.nesterov, first});
  }
}

std::map<std::string, Tensor*> SGD::state_slots() {
  std::map<std::string, Tensor*> s;
  for (size_t i = 0; i < buffers_.size(); ++i) s["state." + std::to_string(i) + ".momentum_buffer"] = &buffers_[i];
  return s;
}

std::map<std::string, double*> SGD::hyperparameters() {
  return {{"lr", &options_.lr},
          {"momentum", &options_.momentum},
          {"dampening", &options_.dampening},
          {"weight_decay", &options_.weight_decay}};
}

}  // namespace engine::nn
