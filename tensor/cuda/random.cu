// Random numbers of tensor/cuda/kernels.h. Counter-based: element i is a hash of
// (seed, i), so no generator state lives on the GPU and any grid gives the same values.
#include <cuda_runtime.h>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

// SplitMix64's finaliser: a bijection on 64-bit words whose output bits each depend on
// every input bit, so consecutive counters give unrelated values.
__device__ __forceinline__ uint64_t mix(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}
__device__ __forceinline__ float uniform_at(uint64_t seed, uint64_t i) {
  return float(mix(seed + 0x9e3779b97f4a7c15ull * (i + 1)) >> 40) * (1.0f / 16777216.0f);  // 24 bits
}

__global__ void uniform_kernel(int64_t n, float* out, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    out[i] = uniform_at(seed, uint64_t(i));
}

// Box-Muller on two uniforms drawn for element i (counters 2i and 2i + 1).
__global__ void normal_kernel(int64_t n, float* out, uint64_t seed) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const float u1 = 1.0f - uniform_at(seed, 2 * uint64_t(i)),
                u2 = uniform_at(seed, 2 * uint64_t(i) + 1);  // u1 in (0, 1]
    out[i] = sqrtf(-2.0f * logf(u1)) * cospif(2.0f * u2);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

void fill_uniform(int device, int64_t n, float* out, uint64_t seed) {
  if (n == 0) return;
  uniform_kernel<<<blocks_for(n, 256, device), 256, 0, stream_of(device)>>>(n, out, seed);
  check_launch("uniform_kernel");
}

void fill_normal(int device, int64_t n, float* out, uint64_t seed) {
  if (n == 0) return;
  normal_kernel<<<blocks_for(n, 256, device), 256, 0, stream_of(device)>>>(n, out, seed);
  check_launch("normal_kernel");
}

}  // namespace engine::cuda
