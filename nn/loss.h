// Losses, and the log-softmax they rest on.
//
//   Variable logits = model(x);                        // (N, C)
//   Variable loss = cross_entropy(logits, labels);     // labels: int64 (N,), values in [0, C)
//                                                      // or -100: a row left out (padding)
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
// the softmax, the backward is (softmax - one_hot(target)) / N. As in PyTorch, rows whose
// target is ignore_index (-100 unless given) are left out: no loss, no gradient, and N
// counts only the others (every row left out: the loss is NaN, 0 / 0, the gradient 0).
// Also PyTorch's other shapes: logits (C,) with a 0-d target, and (N, C, d1, ..., dk) with
// targets (N, d1, ..., dk), a class at every position, the mean taken over all of them.
Variable cross_entropy(const Variable& logits, const Tensor& targets, int64_t ignore_index = -100);

Variable mse_loss(const Variable& input, const Variable& target);

struct CrossEntropyLoss {
  int64_t ignore_index = -100;
  Variable operator()(const Variable& logits, const Tensor& targets) const {
    return cross_entropy(logits, targets, ignore_index);
  }
};
struct MSELoss {
  Variable operator()(const Variable& input, const Variable& target) const { return mse_loss(input, target); }
};

}  // namespace engine::nn
