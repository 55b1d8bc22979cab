// Batch normalisation layers, as PyTorch's BatchNorm1d and BatchNorm2d (SyncBatchNorm,
// which shares the statistics across ranks, is in dist/sync_batchnorm.h).
//
//   BatchNorm2d bn(32);          // per-channel batch statistics in train(), running ones in eval()
//   Variable y = bn(x);          // x (N,32,H,W)
#pragma once

#include "nn/module.h"

namespace engine {
struct BatchNormTrain;  // tensor/nn_ops.h
}

namespace engine::nn {

// Batch normalisation over every dim but the channel dim (dim 1): in training, normalise
// with the batch's mean and biased variance and update the running statistics
// (running = (1 - momentum) running + momentum * batch, with the unbiased variance);
// in eval, normalise with the running statistics. Then scale by weight, shift by bias.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t features, int64_t input_dims_lo, int64_t input_dims_hi, double eps, double momentum);
  Variable forward(const Variable& x) override;
  // relu(forward(x)); in training on the CPU the ReLU runs inside the same passes (one
  // read and one write of the activations saved, forward and backward). nn::Sequential
  // calls it for a BatchNorm followed by a ReLU.
  Variable forward_relu(const Variable& x);
  // max_pool2d(relu(forward(x)), 2, 2, 0); in training on a CPU with AVX-512VL all three in
  // one pass that never writes the normalised activations (nn::Sequential calls it for
  // BatchNorm, ReLU, MaxPool2d(2)).
  Variable forward_relu_pool2(const Variable& x);
  Variable weight, bias;  // (C,), ones and zeros
  Tensor running_mean, running_var, num_batches_tracked;
  int64_t features;
  double eps, momentum;

 protected:
  void check_state(const std::string& prefix, const StateDict& state) const override;

 private:
  Variable train_fused(const Variable& x, bool relu);
  void update_running_statistics(const BatchNormTrain& batch, int64_t count);
  bool runs_fused(const Variable& x) const;
  bool evals_fused(const Variable& x) const;
  Variable eval_fused(const Variable& x, bool relu, bool pool2) const;
  bool fits(const Variable& x) const;  // the shape forward() accepts in training
  int64_t dims_lo_, dims_hi_;          // accepted input ranks
};

// Input (N, C) or (N, C, L).
class BatchNorm1d : public BatchNorm {
 public:
  explicit BatchNorm1d(int64_t features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm(features, 2, 3, eps, momentum) {}
};

// Input (N, C, H, W).
class BatchNorm2d : public BatchNorm {
 public:
  explicit BatchNorm2d(int64_t features, double eps = 1e-5, double momentum = 0.1)
      : BatchNorm(features, 4, 4, eps, momentum) {}
};

}  // namespace engine::nn
