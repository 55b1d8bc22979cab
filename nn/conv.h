// Convolution and pooling layers, initialised as PyTorch's.
//
//   Conv2d conv(1, 32, /*kernel=*/3, /*stride=*/1, /*padding=*/1);   // (N,1,28,28) -> (N,32,28,28)
//   MaxPool2d pool(2);                                               // -> (N,32,14,14)
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

}  // namespace engine::nn
