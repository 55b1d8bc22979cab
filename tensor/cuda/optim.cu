// Fused optimizer steps of tensor/cuda/kernels.h: one read and one write of each state
// array per step, the same update rules as nn/sgd.cc and nn/adam.cc. Kernels first.
#include <cuda_runtime.h>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

// d = g + wd * p; with momentum: b = first ? d : m * b + (1 - dampening) * d, and
// d = nesterov ? d + m * b : b; then p -= lr * d.
__global__ void sgd_kernel(int64_t n, float* p, const float* g, float* buf, SgdArgs a) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(blockDim.x) * gridDim.x) {
    float d = g[k] + a.weight_decay * p[k];
    if (buf) {
      const float b = a.first ? d : a.momentum * buf[k] + (1.f - a.dampening) * d;
      buf[k] = b;
      d = a.nesterov ? d + a.momentum * b : b;
    }
    p[k] -= a.lr * d;
  }
}

// Adam (decoupled = AdamW): m = b1 m + (1 - b1) g, v = b2 v + (1 - b2) g^2,
// p -= step_size * m / (sqrt(v) / sqrt(1 - b2^t) + eps), step_size = lr / (1 - b1^t).
__global__ void adam_kernel(int64_t n, float* p, const float* g, float* m, float* v, AdamArgs a) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n; k += int64_t(blockDim.x) * gridDim.x) {
    float gk = g[k];
    if (!a.decoupled && a.weight_decay != 0) gk += a.weight_decay * p[k];
    const float pk = p[k] * a.decay;
    const float mk = a.beta1 * m[k] + (1 - a.beta1) * gk;
    const float vk = a.beta2 * v[k] + (1 - a.beta2) * gk * gk;
    m[k] = mk, v[k] = vk;
    p[k] = pk - a.step_size * mk / (sqrtf(vk) / a.bias_correction2_sqrt + a.eps);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

void sgd_step(int device, int64_t n, float* param, const float* grad, float* momentum_buffer, const SgdArgs& a) {
  if (n == 0) return;
  sgd_kernel<<<blocks_for(n, 256, device), 256, 0, stream_of(device)>>>(n, param, grad, momentum_buffer, a);
  check_launch("sgd_kernel");
}

void adam_step(int device, int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamArgs& a) {
  if (n == 0) return;
  adam_kernel<<<blocks_for(n, 256, device), 256, 0, stream_of(device)>>>(n, param, grad, exp_avg, exp_avg_sq, a);
  check_launch("adam_kernel");
}

}  // namespace engine::cuda
