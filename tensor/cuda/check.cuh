// Internal to the .cu files: error checks and launch helpers shared by every kernel file.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

constexpr int kMaxDevices = 64;

// Turns a CUDA error into engine::Error with what we were doing and the driver's words.
inline void check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    cudaGetLastError();  // clear it, so the next call does not report it again
    throw Error(std::string("[cuda] ") + what + " failed: " + cudaGetErrorString(status));
  }
}

// After every launch: a bad configuration shows up here, a fault inside the kernel at the
// next synchronisation.
inline void check_launch(const char* kernel) { check(cudaGetLastError(), kernel); }

inline cudaStream_t stream_of(int device) { return static_cast<cudaStream_t>(current_stream(device)); }

// Blocks for a grid-stride loop over n items with `threads` per block: enough to fill the
// GPU several times over, never more than the items need.
inline int blocks_for(int64_t n, int threads, int device) {
  const int64_t want = (n + threads - 1) / threads;
  const int64_t cap = int64_t(multiprocessor_count(device)) * 32;
  return int(std::max<int64_t>(1, std::min(want, cap)));
}

}  // namespace engine::cuda
