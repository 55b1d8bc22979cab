#include "dist/sync_batchnorm.h"

#include <cmath>

#include "autograd/ops.h"
#include "dist/dist.h"
#include "tensor/ops.h"

namespace engine::dist {

using nn::Variable;
using Grads = std::vector<Tensor>;
using Needs = autograd::Needs;

namespace {

// The per-channel layout of an (N, C, ...) input: the dims reduced over and the shape
// (1, C, 1, ...) that broadcasts a per-channel value.
struct ChannelLayout {
  std::vector<int64_t> dims;
  Shape cshape;
  int64_t C;
};

ChannelLayout channel_layout(const Tensor& x, int64_t C) {
  ChannelLayout l{{0}, Shape(size_t(x.dim()), 1), C};
  l.cshape[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) l.dims.push_back(d);
  return l;
}

// This rank's [count, mean (C), M2 (C)] on the input's device (zeros but the count when
// the batch is empty).
Tensor local_moments(const Tensor& x, const ChannelLayout& l) {
  const int64_t C = l.C, count = x.numel() / C;
  Tensor mine = zeros({1 + 2 * C}, DType::Float32, x.device());
  mine.narrow(0, 0, 1).fill_(double(count));
  if (count > 0) {
    const Tensor m = mean(x, l.dims, true);
    mine.narrow(0, 1, C).copy_(m.reshape({C}));
    mine.narrow(0, 1 + C, C).copy_(sum(pow(x - m, 2.0), l.dims).reshape({C}));
  }
  return mine;
}

struct GlobalMoments {
  double n = 0;                  // values per channel over every rank
  std::vector<float> mean, var;  // per channel; var is biased (M2 / n)
  std::vector<float> invstd;     // 1 / sqrt(var + eps)
};

// Chan et al.'s combination of every rank's triple: n = sum n_r, mean = sum n_r mean_r / n,
// M2 = sum (M2_r + n_r (mean_r - mean)^2).
GlobalMoments combine_moments(std::vector<Tensor> all, int64_t C, double eps) {
  for (Tensor& t : all) t = t.to(Device::cpu());  // 1 + 2C numbers per rank, combined on the host
  GlobalMoments g;
  for (auto& t : all) g.n += t.at({0});
  ENGINE_REQUIRE(g.n > 1, "[SyncBatchNorm] needs more than 1 value per channel across all ranks in training, got ",
                 g.n);
  std::vector<double> mu(size_t(C), 0.0), m2(size_t(C), 0.0);
  for (auto& t : all)
    for (int64_t c = 0; c < C; ++c) mu[size_t(c)] += t.at({0}) * t.at({1 + c}) / g.n;
  for (auto& t : all)
    for (int64_t c = 0; c < C; ++c) {
      const double d = t.at({1 + c}) - mu[size_t(c)];
      m2[size_t(c)] += t.at({1 + C + c}) + t.at({0}) * d * d;
    }
  for (int64_t c = 0; c < C; ++c) {
    g.mean.push_back(float(mu[size_t(c)]));
    g.var.push_back(float(m2[size_t(c)] / g.n));
    g.invstd.push_back(float(1.0 / std::sqrt(m2[size_t(c)] / g.n + eps)));
  }
  return g;
}

// What backward needs, and the rule itself: with gw = dy * weight,
// dx = invstd / N * (N gw - sum(gw) - xhat * sum(gw xhat)), the sums over the global batch
// (one all_reduce of 2C numbers; a rank with an empty batch contributes zeros but joins).
struct SyncBatchNormBackward {
  ChannelLayout l;
  Tensor xhat, invstd, w;
  double n;
  int64_t count;
  ProcessGroup* group;

  Grads operator()(const Tensor& dy, const Needs& need) const {
    const int64_t C = l.C;
    const Device device = xhat.device();
    Grads grads(3);
    if (need[0]) {
      const Tensor gw = dy * w;
      Tensor sums = zeros({2 * C}, DType::Float32, device);
      if (count > 0) {
        sums.narrow(0, 0, C).copy_(sum(gw, l.dims).reshape({C}));
        sums.narrow(0, C, C).copy_(sum(gw * xhat, l.dims).reshape({C}));
      }
      group->all_reduce(sums, ReduceOp::Sum).wait();
      const Tensor s1 = sums.narrow(0, 0, C).reshape(l.cshape), s2 = sums.narrow(0, C, C).reshape(l.cshape);
      grads[0] = invstd / n * (gw * n - s1 - xhat * s2);
    }
    // Parameter gradients are this rank's share; DDP averages them.
    const Tensor none = zeros({C}, DType::Float32, device);
    if (need[1]) grads[1] = count > 0 ? sum(dy * xhat, l.dims).reshape({C}) : none;
    if (need[2]) grads[2] = count > 0 ? sum(dy, l.dims).reshape({C}) : none;
    return grads;
  }
};

}  // namespace

SyncBatchNorm::SyncBatchNorm(int64_t features, double eps, double momentum, ProcessGroup* group)
    : nn::BatchNorm(features, 2, 4, eps, momentum), group_(group) {}

void SyncBatchNorm::update_running_stats(const std::vector<float>& mean, const std::vector<float>& var, double n) {
  // running = (1 - momentum) running + momentum * batch, with the unbiased global variance
  autograd::NoGradGuard no_grad;
  running_mean.copy_(running_mean * (1 - momentum) + from_vector(mean).to(running_mean.device()) * momentum);
  running_var.copy_(running_var * (1 - momentum) +
                    from_vector(var).to(running_var.device()) * (momentum * n / (n - 1)));
  num_batches_tracked.copy_(num_batches_tracked + 1.0);
}

Variable SyncBatchNorm::forward(const Variable& x0) {
  if (!is_training()) return nn::BatchNorm::forward(x0);  // running statistics: nothing to sync
  // 16-bit input (a convolution under autocast) is normalised in float32, as BatchNorm does:
  // a bfloat16 mean of values near 100 is only good to 0.5.
  const Variable x = is_half(x0.data().dtype()) ? autograd::to(x0, DType::Float32) : x0;
  const int64_t C = features;
  ENGINE_REQUIRE(x.dim() >= 2 && x.dim() <= 4 && x.size(1) == C, "[SyncBatchNorm] expects input (N, ", C,
                 ", ...) with 2 to 4 dims, got shape ", shape_str(x.shape()));
  ProcessGroup& g = group_ ? *group_ : default_group();
  const Tensor xd = x.data();
  const Device device = xd.device();  // statistics travel on the input's device (a GPU over nccl)
  const ChannelLayout l = channel_layout(xd, C);

  std::vector<Tensor> all;
  g.all_gather(&all, local_moments(xd, l)).wait();
  const GlobalMoments gm = combine_moments(all, C, eps);
  update_running_stats(gm.mean, gm.var, gm.n);

  const Tensor mean_c = from_vector(gm.mean).reshape(l.cshape).to(device);
  const Tensor invstd_c = from_vector(gm.invstd).reshape(l.cshape).to(device);
  const Tensor xhat = (xd - mean_c) * invstd_c;
  const Tensor w = weight.data().reshape(l.cshape), b = bias.data().reshape(l.cshape);
  return autograd::record("sync_batch_norm", xhat * w + b, {x, weight, bias},
                          SyncBatchNormBackward{l, xhat, invstd_c, w, gm.n, xd.numel() / C, &g});
}

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module, ProcessGroup* group) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(module.get()); bn && !dynamic_cast<SyncBatchNorm*>(bn)) {
    auto sync = std::make_shared<SyncBatchNorm>(bn->features, bn->eps, bn->momentum, group);
    sync->load_state_dict(bn->state_dict());  // same weights and running statistics
    sync->train(bn->is_training());
    return sync;
  }
  for (const auto& [name, child] :
       std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>(module->children())) {
    auto converted = convert_sync_batchnorm(child, group);
    if (converted != child) module->set_child(name, converted);
  }
  return module;
}

}  // namespace engine::dist
