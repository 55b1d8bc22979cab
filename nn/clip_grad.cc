#include "nn/clip_grad.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "tensor/check.h"
#include "tensor/ops.h"

namespace engine::nn {

namespace {

void check_norm_type(const char* op, double norm_type) {
  ENGINE_REQUIRE(norm_type > 0 && !std::isnan(norm_type), "[", op, "] norm_type must be > 0 (or inf), got ", norm_type);
}

// A parameter whose gradient goes elsewhere (an FSDP unit's shard) has none here: its norm
// would count as 0 and nothing would be clipped. One in a ZeRO optimizer's reduce-scatter
// design holds this rank's own gradient, not the average.
void check_own_gradients(const char* op, const std::vector<autograd::Variable>& params) {
  for (size_t i = 0; i < params.size(); ++i)
    ENGINE_REQUIRE(params[i].trained_through().empty(), "[", op, "] parameter ", i,
                   " is trained through another one: ", params[i].trained_through());
}

}  // namespace

double grad_norm_part(const std::vector<autograd::Variable>& params, double norm_type) {
  check_norm_type("clip_grad_norm_", norm_type);
  check_own_gradients("clip_grad_norm_", params);
  double part = 0;
  for (const autograd::Variable& p : params) {
    const Tensor& g = p.grad();
    if (!g.defined() || g.numel() == 0) continue;
    if (std::isinf(norm_type)) {
      const double m = max(abs(g)).item();
      part = std::isnan(m) || std::isnan(part) ? NAN : std::max(part, m);  // a NaN wins, as in max
    } else if (norm_type == 2) {
      part += sum(g * g).item();  // squares need no abs
    } else {
      part += sum(norm_type == 1 ? abs(g) : pow(abs(g), norm_type)).item();
    }
  }
  return part;
}

double grad_norm_from_part(double part, double norm_type) {
  if (std::isinf(norm_type) || norm_type == 1) return part;
  return norm_type == 2 ? std::sqrt(part) : std::pow(part, 1.0 / norm_type);
}

void scale_grads_to_norm_(const std::vector<autograd::Variable>& params, double max_norm, double total_norm,
                          double norm_type, bool error_if_nonfinite) {
  ENGINE_REQUIRE(max_norm >= 0, "[clip_grad_norm_] max_norm must be >= 0, got ", max_norm);
  ENGINE_REQUIRE(!error_if_nonfinite || std::isfinite(total_norm), "[clip_grad_norm_] the total norm of order ",
                 norm_type, " of the gradients is ", total_norm,
                 ", so it cannot be clipped (error_if_nonfinite is set; a NaN or inf gradient came from the loss "
                 "or the data)");
  // PyTorch's coefficient, applied only when it shrinks: max_norm / (norm + 1e-6) < 1.
  // A NaN norm gives a NaN coefficient, which (as in PyTorch) makes every gradient NaN.
  const double coef = max_norm / (total_norm + 1e-6);
  if (coef >= 1) return;
  for (const autograd::Variable& p : params) {
    autograd::Variable handle = p;  // shares p's gradient
    if (handle.grad().defined()) mul_(handle.mutable_grad(), coef);
  }
}

double clip_grad_norm_(const std::vector<autograd::Variable>& params, double max_norm, double norm_type,
                       bool error_if_nonfinite) {
  const double total = grad_norm_from_part(grad_norm_part(params, norm_type), norm_type);
  scale_grads_to_norm_(params, max_norm, total, norm_type, error_if_nonfinite);
  return total;
}

void clip_grad_value_(const std::vector<autograd::Variable>& params, double clip_value) {
  ENGINE_REQUIRE(clip_value >= 0, "[clip_grad_value_] clip_value must be >= 0, got ", clip_value);
  check_own_gradients("clip_grad_value_", params);
  for (const autograd::Variable& p : params) {
    autograd::Variable handle = p;  // shares p's gradient
    if (handle.grad().defined()) handle.mutable_grad().copy_(clamp(handle.grad(), -clip_value, clip_value));
  }
}

}  // namespace engine::nn
