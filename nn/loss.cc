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

namespace {
// PyTorch's other shapes, brought to (N, C) rows: logits (C,) with a 0-d target (one
// example), and (N, C, d1, ..., dk) with targets (N, d1, ..., dk), a class at every
// position (per-pixel labels). The class dim is moved last and the rest flattened into
// rows, so the mean runs over every position counted, as PyTorch's.
std::pair<Variable, Tensor> as_rows(const Variable& logits, const Tensor& targets) {
  if (logits.dim() == 1) {
    ENGINE_REQUIRE(targets.dim() == 0, "[cross_entropy] logits of shape ", shape_str(logits.shape()),
                   " (one example) take a 0-d target, got shape ", shape_str(targets.shape()));
    return {autograd::unsqueeze(logits, 0), targets.reshape({1})};
  }
  const Shape& ls = logits.shape();
  Shape expected = ls;  // (N, d1, ..., dk)
  expected.erase(expected.begin() + 1);
  ENGINE_REQUIRE(targets.shape() == expected, "[cross_entropy] targets of shape ", shape_str(targets.shape()),
                 " do not match logits of shape ", shape_str(ls), ": expected ", shape_str(expected),
                 " (the logits' shape without its class dim, dim 1)");
  std::vector<int64_t> order{0};
  for (int64_t d = 2; d < logits.dim(); ++d) order.push_back(d);
  order.push_back(1);
  const int64_t c = ls[1], rows = c == 0 ? 0 : logits.data().numel() / c;
  return {autograd::reshape(autograd::permute(logits, order), {rows, c}), targets.reshape({rows})};
}
}  // namespace

Variable cross_entropy(const Variable& logits0, const Tensor& targets, int64_t ignore_index) {
  if (logits0.dim() != 2 && logits0.dim() > 0 && targets.defined()) {
    const auto [rows, flat] = as_rows(logits0, targets);
    return cross_entropy(rows, flat, ignore_index);
  }
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
