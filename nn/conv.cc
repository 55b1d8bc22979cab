#include "nn/conv.h"

#include <cmath>

#include "nn/functional.h"
#include "tensor/ops.h"

namespace engine::nn {

Conv2d::Conv2d(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t padding, bool with_bias, Generator* gen)
    : stride(stride), padding(padding) {
  ENGINE_REQUIRE(in > 0 && out > 0 && k > 0, "[Conv2d] channels and kernel must be positive, got in=", in, " out=", out,
                 " kernel=", k);
  // Said when the layer is built, not at its first forward, far into a training script.
  ENGINE_REQUIRE(stride > 0 && padding >= 0, "[Conv2d] needs stride > 0 and padding >= 0, got stride ", stride,
                 ", padding ", padding);
  const double b = 1.0 / std::sqrt(double(in * k * k));
  weight = register_parameter("weight", rand({out, in, k, k}, gen) * (2 * b) - b);
  if (with_bias) bias = register_parameter("bias", rand({out}, gen) * (2 * b) - b);
}

Variable Conv2d::forward(const Variable& x) { return conv2d(x, weight, bias, stride, padding); }

Variable MaxPool2d::forward(const Variable& x) { return max_pool2d(x, kernel, stride, padding); }

}  // namespace engine::nn
