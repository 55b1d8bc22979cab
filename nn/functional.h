// Differentiable convolution, pooling and dropout: the ops behind Conv2d, MaxPool2d and
// Dropout. Each records its own backward (derived in functional.cc).
//
//   Variable y = conv2d(x, weight, bias, /*stride=*/1, /*padding=*/1);  // x (N,C,H,W), weight (O,C,kh,kw)
//   Variable p = max_pool2d(y, /*kernel=*/2, /*stride=*/2);
//   Variable d = dropout(p, 0.5, /*training=*/true, &gen);
#pragma once

#include "autograd/ops.h"

namespace engine::nn {

using autograd::Variable;

// y = x W^T + b for x (..., in), W (out, in), b (out,) or undefined. One op with its own
// backward: dx = g W, dW = g^T x, db = sum of g over the batch, each a single GEMM or sum
// that writes its result in the parameter's own layout (no transposed copies).
Variable linear(const Variable& x, const Variable& weight, const Variable& bias);

// 2-D cross-correlation (what deep learning calls convolution), as im2col (tensor/nn_ops.h)
// + one GEMM for the whole batch. bias may be undefined.
// Output (N, O, (H + 2p - kh)/s + 1, (W + 2p - kw)/s + 1). An unbatched image (C, H, W)
// gives (O, H', W'), as in PyTorch; so does max_pool2d.
Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride, int64_t padding);

// Max over kernel x kernel windows; padding counts as -infinity. The gradient goes to the
// position of each window's maximum (the first one on ties).
Variable max_pool2d(const Variable& x, int64_t kernel, int64_t stride, int64_t padding = 0);

// Zeroes each element with probability p and scales the rest by 1/(1-p) in training;
// the identity otherwise.
Variable dropout(const Variable& x, double p, bool training, Generator* gen = nullptr);

}  // namespace engine::nn
