// The basic layers: Linear, ReLU, Dropout, Flatten and Sequential, initialised as PyTorch does.
// Convolution and pooling are in conv.h, batch norm in batchnorm.h.
//
//   Linear fc(784, 256);                 // weight (256,784), bias (256,), U(-1/sqrt(784), 1/sqrt(784))
//   Variable y = fc(x);                  // x (N,784) -> y (N,256) = x W^T + b
//   Sequential mlp({std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(),
//                   std::make_shared<Linear>(256, 10)});
#pragma once

#include <vector>

#include "nn/module.h"

namespace engine::nn {

class Linear : public Module {
 public:
  // Weight and bias drawn from U(-k, k), k = 1/sqrt(in_features): PyTorch's default
  // (kaiming_uniform with a = sqrt(5) for the weight works out to the same bound).
  Linear(int64_t in_features, int64_t out_features, bool bias = true, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;

  Variable weight, bias;  // (out, in) and (out,); bias undefined when disabled
  int64_t in_features, out_features;
};

class ReLU : public Module {
 public:
  Variable forward(const Variable& x) override { return autograd::relu(x); }
};

// Zeroes each element with probability p in train() and scales the rest by 1/(1-p);
// p = 1 zeroes everything (x * 0), as in PyTorch.
class Dropout : public Module {
 public:
  explicit Dropout(double p = 0.5, Generator* gen = nullptr);
  Variable forward(const Variable& x) override;
  double p;

 private:
  Generator* gen_;
};

// (N, d1, d2, ...) -> (N, d1*d2*...); needs at least 2 dims, as PyTorch's Flatten().
class Flatten : public Module {
 public:
  Variable forward(const Variable& x) override;
};

// Runs its children in order; they are named "0", "1", ... as in PyTorch. A BatchNorm
// followed by a ReLU, or by a ReLU and MaxPool2d(2), runs as one fused step
// (BatchNorm::forward_relu, forward_relu_pool2): the same values.
class Sequential : public Module {
 public:
  explicit Sequential(const std::vector<ModulePtr>& layers);
  Variable forward(const Variable& x) override;
  ModulePtr operator[](size_t i) const { return children().at(i).second; }
  size_t size() const { return children().size(); }
};

}  // namespace engine::nn
