// Internal to tensor/: the SGD and Adam updates' loops in their AVX-512 forms, picked at
// run time by sgd_step_ and adam_step_ (nn_ops.h). Each computes exactly what the portable
// loop in optim_steps.cc computes, element by element, with the same multiplies and adds and no
// fused multiply-add, so the two agree to the bit:
//
//   if (cpu_has_avx512()) detail::sgd_avx512(n, param, grad, momentum_buffer, args);
#pragma once

#include <cstdint>

#include "tensor/optim_args.h"

namespace engine::detail {

// Needs an AVX-512 CPU (cpu_features.h). For k < n: d = g + wd p; with a buffer b: v = (first ? d : m b + (1 -
// dampening) d), b = v, d = (nesterov ? d + m v : v); then p = p - lr d. b may be null (no momentum).
void sgd_avx512(int64_t n, float* p, const float* g, float* b, const SgdArgs& a);

// Needs an AVX-512 CPU. For k < n, Adam's step on p with gradient g and moments m, v (the
// rule in optim_steps.cc's adam_step_ and nn/adam.h).
void adam_avx512(int64_t n, float* p, const float* g, float* m, float* v, const AdamArgs& a);

}  // namespace engine::detail
