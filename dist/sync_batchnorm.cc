#include "dist/sync_batchnorm.h"

#include <cmath>

#include "dist/dist.h"
#include "tensor/ops.h"

namespace engine::dist {

using nn::Variable;
using Grads = std::vector<Tensor>;
using Needs = autograd::Needs;

SyncBatchNorm::SyncBatchNorm(int64_t features, double eps, double momentum, ProcessGroup* group)
    : nn::BatchNorm(features, 2, 4, eps, momentum), group_(group) {}

Variable SyncBatchNorm::forward(const Variable& x) {
  if (!is_training()) return nn::BatchNorm::forward(x);  // running statistics: nothing to sync
  const int64_t C = features;
  ENGINE_REQUIRE(x.dim() >= 2 && x.dim() <= 4 && x.size(1) == C, "[SyncBatchNorm] expects input (N, ", C,
                 ", ...) with 2 to 4 dims, got shape ", shape_str(x.shape()));
  ProcessGroup& g = group_ ? *group_ : default_group();
  std::vector<int64_t> dims{0};
  Shape cshape(size_t(x.dim()), 1);
  cshape[1] = C;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  const Tensor xd = x.data();
  const int64_t count = xd.numel() / C;

  // This rank's [count, mean (C), M2 (C)], gathered from every rank.
  const Device device = xd.device();  // statistics travel on the input's device (a GPU over nccl)
  Tensor mine = zeros({1 + 2 * C}, DType::Float32, device);
  mine.narrow(0, 0, 1).fill_(double(count));
  if (count > 0) {
    const Tensor m = mean(xd, dims, true);
    mine.narrow(0, 1, C).copy_(m.reshape({C}));
    mine.narrow(0, 1 + C, C).copy_(sum(pow(xd - m, 2.0), dims).reshape({C}));
  }
  std::vector<Tensor> all;
  g.all_gather(&all, mine).wait();
  for (Tensor& t : all) t = t.to(Device::cpu());  // 1 + 2C numbers per rank, combined on the host

  // Chan et al.'s combination: n = sum n_r, mean = sum n_r mean_r / n,
  // M2 = sum (M2_r + n_r (mean_r - mean)^2); the biased variance is M2 / n.
  double n = 0;
  for (auto& t : all) n += t.at({0});
  ENGINE_REQUIRE(n > 1, "[SyncBatchNorm] needs more than 1 value per channel across all ranks in training, got ", n);
  std::vector<double> mu(size_t(C), 0.0), m2(size_t(C), 0.0);
  for (auto& t : all)
    for (int64_t c = 0; c < C; ++c) mu[size_t(c)] += t.at({0}) * t.at({1 + c}) / n;
  for (auto& t : all)
    for (int64_t c = 0; c < C; ++c) {
      const double d = t.at({1 + c}) - mu[size_t(c)];
      m2[size_t(c)] += t.at({1 + C + c}) + t.at({0}) * d * d;
    }
  std::vector<float> meanv(static_cast<size_t>(C)), invstdv(static_cast<size_t>(C)), varv(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) {
    meanv[size_t(c)] = float(mu[size_t(c)]);
    varv[size_t(c)] = float(m2[size_t(c)] / n);
    invstdv[size_t(c)] = float(1.0 / std::sqrt(m2[size_t(c)] / n + eps));
  }
  const Tensor mean_c = from_vector(meanv).reshape(cshape).to(device);
  const Tensor invstd_c = from_vector(invstdv).reshape(cshape).to(device);
  {  // running statistics, with the unbiased global variance
    autograd::NoGradGuard no_grad;
    running_mean.copy_(running_mean * (1 - momentum) + from_vector(meanv).to(running_mean.device()) * momentum);
    running_var.copy_(running_var * (1 - momentum) +
                      from_vector(varv).to(running_var.device()) * (momentum * n / (n - 1)));
    num_batches_tracked.copy_(num_batches_tracked + 1.0);
  }

  const Tensor xhat = (xd - mean_c) * invstd_c;
  const Tensor w = weight.data().reshape(cshape), b = bias.data().reshape(cshape);
  ProcessGroup* gp = &g;
  return autograd::record("sync_batch_norm", xhat * w + b, {x, weight, bias},
                          [=](const Tensor& dy, const Needs& need) {
                            Grads grads(3);
                            if (need[0]) {
                              // The two global sums, reduced over every rank (a rank with an
                              // empty batch contributes zeros but still joins).
                              const Tensor gw = dy * w;
                              Tensor sums = zeros({2 * C}, DType::Float32, device);
                              if (count > 0) {
                                sums.narrow(0, 0, C).copy_(sum(gw, dims).reshape({C}));
                                sums.narrow(0, C, C).copy_(sum(gw * xhat, dims).reshape({C}));
                              }
                              gp->all_reduce(sums, ReduceOp::Sum).wait();
                              const Tensor s1 = sums.narrow(0, 0, C).reshape(cshape), s2 = sums.narrow(0, C, C).reshape(cshape);
                              grads[0] = invstd_c / n * (gw * n - s1 - xhat * s2);
                            }
                            // Parameter gradients are this rank's share; DDP averages them.
                            if (need[1])
                              grads[1] = count > 0 ? sum(dy * xhat, dims).reshape({C}) : zeros({C}, DType::Float32, device);
                            if (need[2])
                              grads[2] = count > 0 ? sum(dy, dims).reshape({C}) : zeros({C}, DType::Float32, device);
                            return grads;
                          });
}

std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module, ProcessGroup* group) {
  if (auto* bn = dynamic_cast<nn::BatchNorm*>(module.get()); bn && !dynamic_cast<SyncBatchNorm*>(bn)) {
    auto sync = std::make_shared<SyncBatchNorm>(bn->features, bn->eps, bn->momentum, group);
    sync->load_state_dict(bn->state_dict());  // same weights and running statistics
    sync->train(bn->is_training());
    return sync;
  }
  for (const auto& [name, child] : std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>>(module->children())) {
    auto converted = convert_sync_batchnorm(child, group);
    if (converted != child) module->set_child(name, converted);
  }
  return module;
}

}  // namespace engine::dist
