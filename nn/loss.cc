#include "nn/loss.h"

#include <cmath>

#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine::nn {

using Grads = std::vector<Tensor>;
using Needs = autograd::Needs;

namespace {
// logsumexp over the last dim with keepdim: m + log(sum(exp(x - m))), m = max(x).
Tensor logsumexp_last(const Tensor& x) {
  const Tensor m = max(x, {-1}, true);
  return m + log(sum(exp(x - m), {-1}, true));
}
}  // namespace

Variable log_softmax(const Variable& x) {
  ENGINE_REQUIRE(x.dim() >= 1, "[log_softmax] needs at least 1 dim");
  // bfloat16 and float16 are computed in float32 and rounded once, as PyTorch does:
  // x - logsumexp in 16 bits would first round logsumexp, an error of several units in
  // the last place of every output near 0.
  if (is_half(x.data().dtype())) return autograd::to(log_softmax(autograd::to(x, DType::Float32)), x.data().dtype());
  if (x.size(-1) == 0)  // no classes: nothing to normalise, an empty result (as PyTorch)
    return autograd::record("log_softmax", x.data().clone(), {x},
                            [](const Tensor& g, const Needs&) { return Grads{g}; });
  const Tensor out = x.data() - logsumexp_last(x.data());
  return autograd::record("log_softmax", out, {x}, [out](const Tensor& g, const Needs&) {
    // d/dx_j of (x_i - lse) is [i = j] - softmax_j, so grad_in = g - softmax * sum(g).
    return Grads{g - exp(out) * sum(g, {-1}, true)};
  });
}

Variable cross_entropy(const Variable& logits0, const Tensor& targets, int64_t ignore_index) {
  // 16-bit logits (from layers under autocast) are widened: the log-softmax of 10 classes
  // needs float32's digits, as in PyTorch's autocast, whose float32 list has this loss.
  const Variable logits = is_half(logits0.data().dtype()) ? autograd::to(logits0, DType::Float32) : logits0;
  // Softmax, the loss and what backward needs, in one pass (tensor/nn_ops.cc).
  const CrossEntropy saved = cross_entropy_forward(logits.data(), targets, ignore_index);
  const Tensor t = targets;
  return autograd::record("cross_entropy", saved.loss, {logits}, [saved, t](const Tensor& g, const Needs&) {
    return Grads{cross_entropy_backward(saved, t, g)};  // (softmax - onehot(t)) * g / rows counted
  });
}

Variable mse_loss(const Variable& input, const Variable& target) {
  ENGINE_REQUIRE(input.shape() == target.shape(), "[mse_loss] input of shape ", shape_str(input.shape()),
                 " and target of shape ", shape_str(target.shape()), " differ");
  return autograd::mean(autograd::pow(input - target, 2.0));
}

}  // namespace engine::nn
