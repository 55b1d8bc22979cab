#include "nn/layers.h"

#include <cmath>
#include <typeinfo>

#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "tensor/ops.h"

namespace engine::nn {

Linear::Linear(int64_t in, int64_t out, bool with_bias, Generator* gen) : in_features(in), out_features(out) {
  ENGINE_REQUIRE(in > 0 && out > 0, "[Linear] sizes must be positive, got in_features=", in, " out_features=", out);
  const double k = 1.0 / std::sqrt(double(in));
  weight = register_parameter("weight", rand({out, in}, gen) * (2 * k) - k);
  if (with_bias) bias = register_parameter("bias", rand({out}, gen) * (2 * k) - k);
}

Variable Linear::forward(const Variable& x) {
  ENGINE_REQUIRE(x.dim() >= 1 && x.size(-1) == in_features, "[Linear] expects input with last dim ", in_features,
                 ", got shape ", shape_str(x.shape()));
  return linear(x, weight, bias);  // y = x W^T + b (nn/functional.cc)
}

Variable Flatten::forward(const Variable& x) {
  // PyTorch's Flatten() keeps dim 0 (the batch) and flattens dims 1 onwards, so it needs
  // a dim 1: a (4,) input is refused there too, not turned into (4, 1).
  ENGINE_REQUIRE(x.dim() >= 2, "[Flatten] keeps dim 0 (the batch) and flattens dims 1 onwards, so it needs at least ",
                 "2 dims, got shape ", shape_str(x.shape()));
  return autograd::reshape(x, {x.size(0), -1});
}

Sequential::Sequential(const std::vector<ModulePtr>& layers) {
  for (size_t i = 0; i < layers.size(); ++i) {
    ENGINE_REQUIRE(layers[i] != nullptr, "[Sequential] layer ", i, " is null");
    register_module(std::to_string(i), layers[i]);
  }
}

namespace {
// A BatchNorm of this file's kinds, not a subclass with a forward of its own (SyncBatchNorm).
BatchNorm* plain_batch_norm(Module& m) {
  const std::type_info& t = typeid(m);
  return t == typeid(BatchNorm2d) || t == typeid(BatchNorm1d) || t == typeid(BatchNorm) ? static_cast<BatchNorm*>(&m)
                                                                                        : nullptr;
}
// MaxPool2d with 2x2 windows at stride 2, no padding.
bool is_pool2(const Module& m) {
  if (typeid(m) != typeid(MaxPool2d)) return false;
  const auto& pool = static_cast<const MaxPool2d&>(m);
  return pool.kernel == 2 && pool.stride == 2 && pool.padding == 0;
}
}  // namespace

Variable Sequential::forward(const Variable& x) {
  Variable h = x;
  const auto& layers = children();  // children, so set_child() swaps a layer
  for (size_t i = 0; i < layers.size(); ++i) {
    // BatchNorm then ReLU (and a 2x2 max-pool): one pass over the activations (same values).
    BatchNorm* bn = plain_batch_norm(*layers[i].second);
    if (bn != nullptr && i + 1 < layers.size() && typeid(*layers[i + 1].second) == typeid(ReLU)) {
      if (i + 2 < layers.size() && is_pool2(*layers[i + 2].second)) {
        h = bn->forward_relu_pool2(h);
        i += 2;
        continue;
      }
      h = bn->forward_relu(h);
      ++i;
      continue;
    }
    h = (*layers[i].second)(h);
  }
  return h;
}

Dropout::Dropout(double p, Generator* gen) : p(p), gen_(gen) {
  ENGINE_REQUIRE(p >= 0 && p <= 1, "[Dropout] probability must be in [0, 1], got ", p);
}

Variable Dropout::forward(const Variable& x) { return dropout(x, p, is_training(), gen_); }

}  // namespace engine::nn
