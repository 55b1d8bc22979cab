#include "nn/loss.h"

#include <cmath>

#include "tensor/cuda/kernels.h"
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
  const Tensor out = x.data() - logsumexp_last(x.data());
  return autograd::record("log_softmax", out, {x}, [out](const Tensor& g, const Needs&) {
    // d/dx_j of (x_i - lse) is [i = j] - softmax_j, so grad_in = g - softmax * sum(g).
    return Grads{g - exp(out) * sum(g, {-1}, true)};
  });
}

namespace {
// cross_entropy on a GPU: one warp per row computes softmax and the row's loss (written to
// keep its digits near 0, see tensor/cuda/nn.cu), a mean
// reduction gives the loss. A bad target is found by the kernel; reading its flag waits
// for the GPU, which the loss's first use would do anyway.
Variable cross_entropy_cuda(const Variable& logits, const Tensor& x, const Tensor& t) {
  const Device dev = x.device();
  ENGINE_REQUIRE(t.device() == dev, "[cross_entropy] logits are on ", dev.str(), " but targets on ", t.device().str());
  const int64_t n = x.size(0), c = x.size(1);
  Tensor probs = empty({n, c}, DType::Float32, dev), rows = empty({n}, DType::Float32, dev);
  Tensor rest = empty({n}, DType::Float32, dev);  // 1 - probs[i][t_i], for the gradient
  Tensor bad = full({}, -1, DType::Int64, dev);
  cuda::cross_entropy_forward(dev.index, n, c, x.data<float>(), t.data<int64_t>(), probs.data<float>(),
                              rows.data<float>(), rest.data<float>(), bad.data<int64_t>());
  const int64_t bad_row = int64_t(bad.item());
  ENGINE_REQUIRE(bad_row < 0, "[cross_entropy] target ", t.at({bad_row}), " at index ", bad_row,
                 " is out of range for ", c, " classes");
  return autograd::record("cross_entropy", mean(rows), {logits}, [probs, rest, t, n, c, dev](const Tensor& g, const Needs&) {
    Tensor d = empty({n, c}, DType::Float32, dev);
    const Tensor gd = g.to(dev).contiguous();
    cuda::cross_entropy_backward(dev.index, n, c, probs.data<float>(), rest.data<float>(), t.data<int64_t>(),
                                 gd.data<float>(), d.data<float>());
    return Grads{d};
  });
}
}  // namespace

Variable cross_entropy(const Variable& logits, const Tensor& targets) {
  const Tensor& x0 = logits.data();
  ENGINE_REQUIRE(x0.dim() == 2, "[cross_entropy] expects logits of shape (N, C), got ", shape_str(x0.shape()));
  ENGINE_REQUIRE(targets.dtype() == DType::Int64, "[cross_entropy] targets must be int64 class indices, got ",
                 dtype_name(targets.dtype()));
  ENGINE_REQUIRE(targets.dim() == 1 && targets.size(0) == x0.size(0), "[cross_entropy] targets of shape ",
                 shape_str(targets.shape()), " do not match logits of shape ", shape_str(x0.shape()));
  const int64_t n = x0.size(0), c = x0.size(1);
  ENGINE_REQUIRE(n > 0, "[cross_entropy] got an empty batch");
  const Tensor x = x0.contiguous(), t = targets.contiguous();
  if (x.device().is_cuda()) return cross_entropy_cuda(logits, x, t);
  const float* px = x.data<float>();
  const int64_t* pt = t.data<int64_t>();
  Tensor probs = empty({n, c});  // softmax, kept for backward
  float* pp = probs.data<float>();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t target = pt[i];
    ENGINE_REQUIRE(target >= 0 && target < c, "[cross_entropy] target ", target, " at index ", i,
                   " is out of range for ", c, " classes");
    const float* row = px + i * c;
    float m = row[0];
    for (int64_t j = 1; j < c; ++j) m = std::max(m, row[j]);
    double s = 0;
    for (int64_t j = 0; j < c; ++j) s += std::exp(double(row[j] - m));
    const double lse = m + std::log(s);
    for (int64_t j = 0; j < c; ++j) pp[i * c + j] = float(std::exp(double(row[j]) - lse));
    total += lse - row[target];  // -log softmax(x)[target]
  }
  return autograd::record("cross_entropy", scalar_tensor(total / double(n)), {logits},
                          [probs, t, n, c](const Tensor& g, const Needs&) {
                            // d loss / d x_ij = (softmax_ij - [j = target_i]) / N
                            Tensor d = probs.clone();
                            float* pd = d.data<float>();
                            const int64_t* pt = t.data<int64_t>();
                            for (int64_t i = 0; i < n; ++i) pd[i * c + pt[i]] -= 1.0f;
                            return Grads{d * (g.item() / double(n))};
                          });
}

Variable mse_loss(const Variable& input, const Variable& target) {
  ENGINE_REQUIRE(input.shape() == target.shape(), "[mse_loss] input of shape ", shape_str(input.shape()),
                 " and target of shape ", shape_str(target.shape()), " differ");
  return autograd::mean(autograd::pow(input - target, 2.0));
}

}  // namespace engine::nn
