// Gradient clipping, as PyTorch's torch.nn.utils.clip_grad_norm_ and clip_grad_value_:
// called between backward() and the optimizer's step (under DDP the gradients are already
// averaged, so every rank clips alike; FSDP has its own, over the shards of every rank).
//
//   loss.backward();
//   double norm = nn::clip_grad_norm_(model->parameters(), /*max_norm=*/1.0);  // before clipping
//   opt.step();
//
// The total norm is the p-norm of all gradients taken as one vector: (sum |g|^p)^(1/p),
// or max |g| for p = inf. When it exceeds max_norm every gradient is multiplied by
// max_norm / (norm + 1e-6), PyTorch's coefficient; a NaN or inf norm makes the gradients NaN
// (PyTorch's default), or is refused with error_if_nonfinite. Parameters without a
// gradient are skipped.
#pragma once

#include <limits>
#include <vector>

#include "autograd/variable.h"

namespace engine::nn {

constexpr double kInfNorm = std::numeric_limits<double>::infinity();

// Returns the total norm of the gradients before clipping.
double clip_grad_norm_(const std::vector<autograd::Variable>& params, double max_norm, double norm_type = 2.0,
                       bool error_if_nonfinite = false);

// Clamps every gradient element into [-clip_value, clip_value].
void clip_grad_value_(const std::vector<autograd::Variable>& params, double clip_value);

// The pieces clip_grad_norm_ is made of, for callers whose gradients are spread over
// ranks (FSDP): the part that adds up across shards (sum |g|^p, in double; max |g| for
// p = inf), the norm from the whole part, and the scaling.
double grad_norm_part(const std::vector<autograd::Variable>& params, double norm_type);
double grad_norm_from_part(double part, double norm_type);
void scale_grads_to_norm_(const std::vector<autograd::Variable>& params, double max_norm, double total_norm,
                          double norm_type, bool error_if_nonfinite);

}  // namespace engine::nn
