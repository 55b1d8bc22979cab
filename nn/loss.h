// Losses, and the log-softmax they rest on.
//
//   Variable logits = model(x);                        // (N, C)
//   Variable loss = cross_entropy(logits, labels);     // labels: int64 (N,), values in [0, C)
//   Variable l2 = mse_loss(prediction, target);        // mean of squared differences
//
// CrossEntropyLoss and MSELoss are the same as objects, for code that reads like PyTorch's.
#pragma once

#include "autograd/ops.h"

namespace engine::nn {

using autograd::Variable;

// log(softmax(x)) over the last dim, computed as x - logsumexp(x) with the max subtracted
// first, so large logits never overflow exp.
Variable log_softmax(const Variable& x);

// Mean over the batch of -log softmax(logits)[i, target_i]. One fused op: the forward keeps
// the softmax, the backward is (softmax - one_hot(target)) / N.
Variable cross_entropy(const Variable& logits, const Tensor& targets);

Variable mse_loss(const Variable& input, const Variable& target);

struct CrossEntropyLoss {
  Variable operator()(const Variable& logits, const Tensor& targets) const { return cross_entropy(logits, targets); }
};
struct MSELoss {
  Variable operator()(const Variable& input, const Variable& target) const { return mse_loss(input, target); }
};

}  // namespace engine::nn
