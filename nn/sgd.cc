#include "nn/sgd.h"

#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine::nn {

SGD::SGD(std::vector<autograd::Variable> params, SGDOptions options)
    : Optimizer(std::move(params), "SGD"), buffers_(params_.size()), options_(options) {
  check_options();
}

void SGD::check_options() const {
  const SGDOptions& o = options_;
  require_in("learning rate", o.lr, 0, 1e6);
  require_in("momentum", o.momentum, 0, 1e6);
  require_in("dampening", o.dampening, 0, 1);
  require_in("weight_decay", o.weight_decay, 0, 1e6);
  ENGINE_REQUIRE(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
                 "[SGD] Nesterov momentum needs momentum > 0 and dampening = 0");
}

void SGD::step() {
  const SGDOptions& o = options_;
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor* grad = grad_to_step(i);
    if (!grad) continue;  // no gradient this step: leave it alone, as PyTorch does
    Tensor p = params_[i].data();
    const bool first = o.momentum != 0 && !buffers_[i].defined();
    if (first) buffers_[i] = empty(p.shape(), DType::Float32, p.device());
    // The whole update rule (see sgd.h) in one pass over the parameter (tensor/nn_ops.cc).
    sgd_step_(p, *grad, &buffers_[i],
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
