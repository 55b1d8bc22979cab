// The arguments of the fused optimizer updates (tensor/nn_ops.h on any device, the CUDA
// kernels in tensor/cuda/optim.cu): one struct per rule, already in float, read by both.
//
//   SgdArgs a{.lr = 0.1f, .weight_decay = 0, .momentum = 0.9f, .dampening = 0, .nesterov = false, .first = true};
#pragma once

namespace engine {

struct SgdArgs {
  float lr, weight_decay, momentum, dampening;
  bool nesterov, first;  // first: the momentum buffer is set to the gradient, as PyTorch does
};

// step_size = lr / (1 - beta1^t), bias_correction2_sqrt = sqrt(1 - beta2^t),
// decay = 1 - lr * weight_decay for AdamW (decoupled), else 1.
struct AdamArgs {
  float beta1, beta2, eps, weight_decay, step_size, bias_correction2_sqrt, decay;
  bool decoupled;  // AdamW
};

}  // namespace engine
