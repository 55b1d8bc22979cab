#include "nn/batchnorm.h"

#include "nn/functional.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine::nn {

BatchNorm::BatchNorm(int64_t features, int64_t lo, int64_t hi, double eps, double momentum)
    : features(features), eps(eps), momentum(momentum), dims_lo_(lo), dims_hi_(hi) {
  ENGINE_REQUIRE(features > 0, "[BatchNorm] features must be positive, got ", features);
  // eps keeps the divisor sqrt(var + eps) above 0; momentum mixes batch statistics into the
  // running ones, so outside [0, 1] (or NaN) it would poison them silently.
  ENGINE_REQUIRE(eps >= 0 && eps <= 1, "[BatchNorm] eps must be in [0, 1], got ", eps);
  ENGINE_REQUIRE(momentum >= 0 && momentum <= 1, "[BatchNorm] momentum must be in [0, 1], got ", momentum);
  weight = register_parameter("weight", ones({features}));
  bias = register_parameter("bias", zeros({features}));
  running_mean = zeros({features});
  running_var = ones({features});
  num_batches_tracked = zeros({}, DType::Int64);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
  register_buffer("num_batches_tracked", &num_batches_tracked);
}

namespace {
// 16-bit input (a convolution under autocast) is normalised in float32: the statistics are
// sums over the whole batch, and the parameters are float32.
Variable float32_input(const Variable& x) { return is_half(x.data().dtype()) ? autograd::to(x, DType::Float32) : x; }
}  // namespace

// A variance is never negative: evaluation divides by sqrt(running_var + eps), which would
// turn a negative one into NaN outputs with no error. A count of batches is never negative.
void BatchNorm::check_state(const std::string& prefix, const StateDict& state) const {
  auto var = state.find(prefix + "running_var");
  if (var != state.end() && var->second.numel() > 0) {
    const double lowest = min(var->second.to(DType::Float32)).item();
    ENGINE_REQUIRE(!(lowest < 0), "[load_state_dict] \"", var->first, "\" holds ", lowest,
                   ": a running variance is never negative (the file is not a state this BatchNorm saved)");
  }
  auto count = state.find(prefix + "num_batches_tracked");
  if (count != state.end() && count->second.numel() == 1) {
    const double n = count->second.item();
    ENGINE_REQUIRE(n >= 0, "[load_state_dict] \"", count->first, "\" holds ", n,
                   ": a count of batches is never negative");
  }
}

Variable BatchNorm::forward(const Variable& x0) {
  const Variable x = float32_input(x0);
  ENGINE_REQUIRE(
      x.dim() >= dims_lo_ && x.dim() <= dims_hi_ && x.size(1) == features, "[BatchNorm] expects input with ",
      dims_lo_ == dims_hi_ ? std::to_string(dims_lo_) : std::to_string(dims_lo_) + " or " + std::to_string(dims_hi_),
      " dims and ", features, " channels in dim 1, got shape ", shape_str(x.shape()));
  std::vector<int64_t> dims{0};
  Shape channel_shape(x.dim(), 1);  // (1, C, 1, ...) to broadcast per-channel values
  channel_shape[1] = features;
  for (int64_t d = 2; d < x.dim(); ++d) dims.push_back(d);
  Variable xhat;
  if (is_training()) {
    const int64_t count = x.numel() / features;
    ENGINE_REQUIRE(count > 1, "[BatchNorm] needs more than 1 value per channel in training, got shape ",
                   shape_str(x.shape()));
    if (runs_fused(x)) return train_fused(x, /*relu=*/false);
    Variable mean = autograd::mean(x, dims, true);
    Variable var = autograd::var(x, dims, true, /*correction=*/0);
    xhat = (x - mean) / autograd::sqrt(var + eps);
    // Running statistics: no gradient, updated in place so the registered buffers stay valid.
    const double m = momentum, unbias = double(count) / double(count - 1);
    running_mean.copy_(running_mean * (1 - m) + mean.data().reshape({features}) * m);
    running_var.copy_(running_var * (1 - m) + var.data().reshape({features}) * (m * unbias));
    num_batches_tracked.copy_(num_batches_tracked + 1.0);
  } else {
    if (evals_fused(x)) return eval_fused(x, /*relu=*/false, /*pool2=*/false);
    xhat =
        (x - Variable(running_mean.reshape(channel_shape))) / Variable(sqrt(running_var.reshape(channel_shape) + eps));
  }
  return xhat * autograd::reshape(weight, channel_shape) + autograd::reshape(bias, channel_shape);
}

// Training on the CPU: the fused per-channel loops of nn_ops.h (three passes forward, two
// backward) instead of a dozen broadcast elementwise ops and their saved temporaries.
bool BatchNorm::runs_fused(const Variable& x) const {
  return is_training() && !x.data().device().is_cuda() && x.data().dtype() == DType::Float32;
}

// Evaluation with no gradient recorded (NoGradGuard), on the CPU: one pass per channel
// with the running statistics (nn_ops.h), ReLU and a 2x2 pool fused as in training.
bool BatchNorm::evals_fused(const Variable& x) const {
  return !is_training() && !autograd::is_grad_enabled() && !x.data().device().is_cuda() &&
         x.data().dtype() == DType::Float32 && running_mean.dtype() == DType::Float32 && x.dim() >= dims_lo_ &&
         x.dim() <= dims_hi_ && x.size(1) == features;
}

Variable BatchNorm::eval_fused(const Variable& x, bool relu, bool pool2) const {
  return Variable(batch_norm_eval_forward(x.data().contiguous(), running_mean, running_var, weight.data(), bias.data(),
                                          eps, relu, pool2));
}

bool BatchNorm::fits(const Variable& x) const {
  return x.dim() >= dims_lo_ && x.dim() <= dims_hi_ && x.size(1) == features && x.numel() / features >= 2;
}

Variable BatchNorm::forward_relu(const Variable& x0) {
  const Variable x = float32_input(x0);  // so that 16-bit input takes the fused loops too
  if (evals_fused(x)) return eval_fused(x, /*relu=*/true, /*pool2=*/false);
  if (!runs_fused(x) || !fits(x)) return autograd::relu(forward(x));  // forward() names what is wrong
  return train_fused(x, /*relu=*/true);
}

Variable BatchNorm::forward_relu_pool2(const Variable& x0) {
  const Variable x = float32_input(x0);
  if (evals_fused(x) && batch_norm_relu_pool2_applies(x.data())) return eval_fused(x, /*relu=*/true, /*pool2=*/true);
  if (!runs_fused(x) || !fits(x) || !batch_norm_relu_pool2_applies(x.data()))
    return max_pool2d(forward_relu(x), 2, 2, 0);
  const Tensor xc = x.data().contiguous();
  BatchNormReluPool r = batch_norm_relu_pool2_forward(xc, weight.data(), bias.data(), eps);
  update_running_statistics(r.bn, x.numel() / features);
  const Tensor w = weight.data();
  const BatchNormTrain stats = r.bn;
  return autograd::record("batch_norm_relu_max_pool2", r.out, {x, weight, bias},
                          [xc, stats, w](const Tensor& g, const autograd::Needs&) {
                            BatchNormGrads d = batch_norm_relu_pool2_backward(g, xc, stats, w);
                            return std::vector<Tensor>{d.dx, d.dweight, d.dbias};
                          });
}

// running = (1 - momentum) running + momentum * batch statistic (the variance unbiased);
// no gradient, updated in place so the registered buffers stay valid.
void BatchNorm::update_running_statistics(const BatchNormTrain& batch, int64_t count) {
  const double m = momentum, unbias = double(count) / double(count - 1);
  running_mean.copy_(running_mean * (1 - m) + batch.mean * m);
  running_var.copy_(running_var * (1 - m) + batch.var * (m * unbias));
  num_batches_tracked.copy_(num_batches_tracked + 1.0);
}

Variable BatchNorm::train_fused(const Variable& x, bool relu) {
  const int64_t count = x.numel() / features;
  const Tensor xc = x.data().contiguous();
  const BatchNormTrain saved = batch_norm_train_forward(xc, weight.data(), bias.data(), eps, relu);
  update_running_statistics(saved, count);
  const Tensor w = weight.data();
  BatchNormTrain stats = saved;  // what backward needs: not the output
  stats.out = Tensor();
  return autograd::record(relu ? "batch_norm_relu" : "batch_norm", saved.out, {x, weight, bias},
                          [xc, stats, w](const Tensor& g, const autograd::Needs&) {
                            BatchNormGrads d = batch_norm_train_backward(g, xc, stats, w);
                            return std::vector<Tensor>{d.dx, d.dweight, d.dbias};
                          });
}

}  // namespace engine::nn
