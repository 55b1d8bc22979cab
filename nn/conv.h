// Convolution, pooling, dropout and batch normalisation layers, initialised as PyTorch's.
//
//   Conv2d conv(1, 32, /*kernel=*/3, /*stride=*/1, /*padding=*/1);   // (N,1,28,28) -> (N,32,28,28)
//   MaxPool2d pool(2);                                               // -> (N,32,14,14)
//   BatchNorm2d bn(32);                                              // per-channel batch statistics
//   Dropout drop(0.25);                                              // active only in train()
#pragma once

#include "nn/module.h"

namespace engine::nn {

class Conv2d : public Module {
 public:
  // Weight (out, in, k, k) and bias (out,) from U(-b, b), b = 1/sqrt(in * k * k).
  Conv2d(int64_t in_channels, int64_t out_channels, int64_t kernel, int64_t stride = 1, int64_t padding = 0,
         bool bias = true, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  Variable weight, bias;
  int64_t stride, padding;
};

class MaxPool2d : public Module {
 public:
  // stride defaults to the kernel size, as in PyTorch.
  explicit MaxPool2d(int64_t kernel, int64_t stride = 0, int64_t padding = 0)
      : kernel(kernel), stride(stride ? stride : kernel), padding(padding) {}
  Variable forward(const Variable& x) override;
  int64_t kernel, stride, padding;
};

class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  double p;

 private:
  Generator* gen_;
};

// Batch normalisation over every dim but the channel dim (dim 1): in training, normalise
// with the batch's mean and biased variance and update the running statistics
// (running = (1 - momentum) running + momentum * batch, with the unbiased variance);
// in eval, normalise with the running statistics. Then scale by weight, shift by bias.
class BatchNorm : public Module {
 public:
  BatchNorm(int64_t features, int64_t input_dims_lo, int64_t input_dims_hi, double eps, double momentum);
  Variable forward(const Variable& x) override;
  Variable weight, bias;  // (C,), ones and zeros
  Tensor running_mean, running_var, num_batches_tracked;
  int64_t features;
  double eps, momentum;

 private:
  int64_t dims_lo_, dims_hi_;  // accepted input ranks
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
