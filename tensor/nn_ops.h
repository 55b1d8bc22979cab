// The fused operations behind nn/'s layers, losses and optimizers, on plain tensors: the
// inputs' device decides where each runs (the CPU loops in nn_ops.cc and optim_steps.cc,
// or the CUDA kernels of tensor/cuda/nn.cu and optim.cu, which follow the same algorithm).
// nn/ wraps them in autograd and never names a device.
//
//   Tensor cols = im2col(x, 3, 3, /*stride=*/1, /*padding=*/1, ColumnLayout::BatchInColumns);
//   MaxPool pool = max_pool2d_forward(x, /*kernel=*/2, /*stride=*/2, /*padding=*/0);
//   CrossEntropy ce = cross_entropy_forward(logits, targets);       // ce.loss: 0-dim
//   Tensor dx = cross_entropy_backward(ce, targets, grad_of_loss);
//   sgd_step_(param, grad, &momentum_buffer, args);
#pragma once

#include "tensor/optim_args.h"
#include "tensor/tensor.h"

namespace engine {

// Output size of a window sweep: (in + 2 padding - kernel) / stride + 1.
inline int64_t window_out_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding) {
  return (in + 2 * padding - kernel) / stride + 1;
}
// Throws, naming `op`, unless x is (N, C, H, W) and the padded image holds the kernel.
void check_window(const char* op, const Shape& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding);

// ---- im2col: a convolution as a matrix product.
// Column (c, i, j) of output position (oy, ox) holds x[n, c, oy*s + i - p, ox*s + j - p],
// or 0 where that falls in the padding. PerImage: (N, C*kh*kw, OH*OW), one matrix per
// image. BatchInColumns: (C*kh*kw, N*OH*OW), the whole batch side by side, so that one
// large GEMM does a layer for every image at once.
enum class ColumnLayout { PerImage, BatchInColumns };
Tensor im2col(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
              ColumnLayout layout = ColumnLayout::PerImage);
// The adjoint of im2col: adds each column entry back into the image position it came from.
Tensor col2im(const Tensor& cols, const Shape& x_shape, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
              ColumnLayout layout = ColumnLayout::PerImage);

// ---- 2-d convolution of float32 CPU tensors, one image at a time (conv2d.cc): each image's
// columns are built, multiplied and dropped while they sit in the L2 cache, and the output
// is written in (N, O, OH, OW) order. x (N, C, H, W), w (O, C, kh, kw), bias (O,) or undefined.
// Forward and dx are bit for bit im2col + one GEMM; the backward rebuilds the columns.
bool conv2d_per_image_applies(const Tensor& x, const Tensor& w, const Tensor& bias);  // float32, on the CPU
Tensor conv2d_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding);
struct Conv2dGrads {
  Tensor dx, dw, dbias;  // undefined where not asked for
};
Conv2dGrads conv2d_backward(const Tensor& grad, const Tensor& x, const Tensor& w, int64_t stride, int64_t padding,
                            bool need_dx, bool need_dw, bool need_dbias);

// The same under 16-bit autocast (conv2d_16bit.cc), where conv2d_per_image_applies: x, w
// and bias stay float32 and are rounded to `half` (bfloat16 or float16) inside, the
// products sum in float32, the output is `half` (rounded once), and its `half` gradient
// gives float32 dx, dw and dbias, the unrounded sums.
Tensor conv2d_16bit_forward(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding,
                            DType half);
Conv2dGrads conv2d_16bit_backward(const Tensor& grad, const Tensor& x, const Tensor& w, int64_t stride, int64_t padding,
                                  DType half, bool need_dx, bool need_dw, bool need_dbias);

// The forward on a GPU (float32 x, w and bias on one device): an implicit GEMM that
// gathers each window as it multiplies instead of writing im2col's columns
// (tensor/cuda/conv_tiles.h); output (N, O, OH, OW). nn::conv2d's backward rebuilds the
// columns it needs.
bool conv2d_gpu_applies(const Tensor& x, const Tensor& w, const Tensor& bias);
Tensor conv2d_forward_gpu(const Tensor& x, const Tensor& w, const Tensor& bias, int64_t stride, int64_t padding);

// ---- batch normalisation in training mode, over every dim but dim 1 of a contiguous
// float32 CPU tensor (N, C, ...): per channel c, over its M = N * (H * W * ...) values,
// y = (x - mean_c) * invstd_c * weight_c + bias_c with the biased variance and
// invstd_c = 1 / sqrt(var_c + eps). One pass for the mean, one for the variance (two-pass:
// no cancellation), one for y. The backward, with xhat = (x - mean) invstd:
//   dbias_c = sum dy,  dweight_c = sum dy xhat,
//   dx = weight_c invstd_c (dy - dbias_c / M - xhat dweight_c / M).
// With relu, out = relu(y) in the same pass (a BatchNorm followed by a ReLU, fused by
// nn::Sequential), and the backward first zeroes dy where relu's input y <= 0, recomputing y
// from x with the forward's very expression.
struct BatchNormTrain {
  Tensor out, mean, var, invstd;  // out as x; the others (C,)
  Tensor scale, shift;            // (C,): y = x scale + shift
  bool relu = false;
};
BatchNormTrain batch_norm_train_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps,
                                        bool relu = false);
struct BatchNormGrads {
  Tensor dx, dweight, dbias;
};
BatchNormGrads batch_norm_train_backward(const Tensor& dy, const Tensor& x, const BatchNormTrain& saved,
                                         const Tensor& weight);

struct MaxPool {
  Tensor out;    // (N, C, OH, OW)
  Tensor where;  // int64, the flat input index of each output's maximum (the first NaN, or the first on ties)
};
MaxPool max_pool2d_forward(const Tensor& x, int64_t kernel, int64_t stride, int64_t padding);
// dx (x_shape, zeros) += g at `where`.
Tensor max_pool2d_backward(const Tensor& g, const Tensor& where, const Shape& x_shape);

// ---- BatchNorm (training), ReLU and a 2x2 max-pool at stride 2 in one pass (batch_norm.cc),
// for CPUs with AVX-512VL (batch_norm_relu_pool2_applies): the same out, statistics and
// gradients as batch_norm_train_forward(relu = true) then max_pool2d_forward(x, 2, 2, 0),
// without writing the normalised activations out. bn.out stays undefined. No `where`
// either: the backward finds each window's maximum again from x (the same values, the same
// rule) rather than keep an 8-byte index per output.
struct BatchNormReluPool {
  BatchNormTrain bn;  // relu = true
  Tensor out;         // (N, C, H/2, W/2)
};
bool batch_norm_relu_pool2_applies(const Tensor& x);
BatchNormReluPool batch_norm_relu_pool2_forward(const Tensor& x, const Tensor& weight, const Tensor& bias, double eps);
// g_pooled: (N, C, H/2, W/2); the gradients of x, weight and bias.
BatchNormGrads batch_norm_relu_pool2_backward(const Tensor& g_pooled, const Tensor& x, const BatchNormTrain& saved,
                                              const Tensor& weight);

// ---- batch normalisation in evaluation mode, with the running statistics, in one pass
// (batch_norm.cc): y = x scale + shift per channel, scale = weight / sqrt(running_var
// + eps) and shift = bias - running_mean scale (the two PyTorch's CPU kernel forms too),
// then with relu max(y, 0) (NaN passes), then with pool2 a 2x2 max-pool at stride 2 (needs
// relu and batch_norm_relu_pool2_applies(x)). x (N, C, ...) contiguous float32 on the CPU.
// Nothing is saved for a backward: nn::BatchNorm uses it where no gradient is recorded.
Tensor batch_norm_eval_forward(const Tensor& x, const Tensor& running_mean, const Tensor& running_var,
                               const Tensor& weight, const Tensor& bias, double eps, bool relu, bool pool2);

// ---- softmax cross-entropy of logits (n, c) against int64 targets (n,), mean over the
// rows whose target is not ignore_index (PyTorch's default, -100, marks padding rows).
struct CrossEntropy {
  Tensor loss;     // 0-dim float32: NaN when every row is ignored (0 / 0, as in PyTorch)
  Tensor probs;    // softmax(x), (n, c)
  Tensor rest;     // (n,) 1 - probs[i][t_i], summed from the other classes (no cancellation)
  Tensor counted;  // 0-dim float32: how many rows were not ignored, the mean's divisor
  int64_t ignore_index = -100;
};
// Throws naming the first target outside [0, c) that is not ignore_index.
CrossEntropy cross_entropy_forward(const Tensor& logits, const Tensor& targets, int64_t ignore_index = -100);
// d loss / d x = (probs - onehot(t)) * g / counted, with probs[i][t_i] - 1 taken as
// -rest[i]; 0 on ignored rows.
Tensor cross_entropy_backward(const CrossEntropy& saved, const Tensor& targets, const Tensor& grad);

// ---- optimizer updates: one pass over the parameter, in place (rules in nn/sgd.h, nn/adam.h).
// momentum_buffer: ignored when a.momentum == 0; on the first step (a.first) its values
// are not read, only written.
void sgd_step_(Tensor& param, const Tensor& grad, Tensor* momentum_buffer, const SgdArgs& a);
void adam_step_(Tensor& param, const Tensor& grad, Tensor& exp_avg, Tensor& exp_avg_sq, const AdamArgs& a);

}  // namespace engine
