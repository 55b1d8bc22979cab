// SyncBatchNorm: batch normalisation whose statistics cover the whole global batch, not
// just this rank's slice of it (lesson 3). With small per-rank batches, each rank's own
// mean and variance are noisy; SyncBatchNorm computes them over all ranks together.
//
//   auto model = convert_sync_batchnorm(make_cnn());   // every BatchNorm becomes SyncBatchNorm
//   DistributedDataParallel ddp(model);
//
// Forward (training): each rank computes its count, per-channel mean and sum of squared
// deviations (M2); an all_gather brings every rank's triple to everyone, and Chan's
// formula combines them by count into the global mean and variance. Ranks may have
// different batch sizes, including 0 (such a rank still joins the collectives).
// Backward: with g = dy * weight, dx = invstd / N * (N g - sum(g) - xhat * sum(g xhat)),
// where the two sums run over the global batch: one all_reduce of 2C numbers.
// Eval mode uses the running statistics, like BatchNorm.
#pragma once

#include <memory>
#include <vector>

#include "dist/process_group.h"
#include "nn/batchnorm.h"

namespace engine::dist {

class SyncBatchNorm : public nn::BatchNorm {
 public:
  // Accepts (N, C), (N, C, L) and (N, C, H, W) inputs.
  explicit SyncBatchNorm(int64_t features, double eps = 1e-5, double momentum = 0.1, ProcessGroup* group = nullptr);
  nn::Variable forward(const nn::Variable& x) override;  // 16-bit input is normalised in float32

 private:
  void update_running_stats(const std::vector<float>& mean, const std::vector<float>& var, double n);
  ProcessGroup* group_;
};

// Replaces every BatchNorm1d/2d reachable through children() with a SyncBatchNorm holding
// the same parameters and running statistics; returns the (possibly replaced) module.
std::shared_ptr<nn::Module> convert_sync_batchnorm(std::shared_ptr<nn::Module> module, ProcessGroup* group = nullptr);

}  // namespace engine::dist
