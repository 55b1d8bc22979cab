// CUDA build of tensor/cuda/runtime.h. Kernels first, then the host-side launchers.
#include <cuda_runtime.h>

#include <string>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

// One thread per element, grid-stride loop so any n fits any grid.
__global__ void saxpy_kernel(int64_t n, float a, const float* x, float* y) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n;
       i += int64_t(blockDim.x) * gridDim.x) {
    y[i] = a * x[i] + y[i];
  }
}

// ---------------------------------------------------------------------------------------
// Launchers and runtime wrappers

namespace {
// Turns a CUDA error into engine::Error with what we were doing and the driver's words.
void cuda_check(cudaError_t status, const char* what) {
  if (status != cudaSuccess) {
    throw Error(std::string("[cuda] ") + what + " failed: " + cudaGetErrorString(status));
  }
}
}  // namespace

bool built_with_cuda() { return true; }

int device_count() {
  int n = 0;
  // Any failure here (no driver, driver too old, no device) means "no usable GPU".
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky error
    return 0;
  }
  return n;
}

std::string unavailable_reason() {
  int n = 0;
  cudaError_t status = cudaGetDeviceCount(&n);
  if (status != cudaSuccess) {
    cudaGetLastError();
    return std::string("CUDA runtime reports: ") + cudaGetErrorString(status);
  }
  if (n == 0) return "the CUDA driver sees no GPU";
  return "";
}

void set_device(int device) {
  const int n = device_count();
  if (device < 0 || device >= n) {
    throw Error("[cuda] set_device(" + std::to_string(device) + ") but this machine has " +
                std::to_string(n) + " usable GPU(s)" + (n == 0 ? " (" + unavailable_reason() + ")" : ""));
  }
  cuda_check(cudaSetDevice(device), "cudaSetDevice");
}

void* device_malloc(size_t bytes, int device) {
  set_device(device);
  void* p = nullptr;
  if (bytes == 0) return nullptr;
  cudaError_t status = cudaMalloc(&p, bytes);
  if (status != cudaSuccess) {
    throw Error("[cuda] cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" +
                std::to_string(device) + " failed: " + cudaGetErrorString(status));
  }
  return p;
}

void device_free(void* ptr, int device) {
  if (ptr == nullptr) return;
  cudaSetDevice(device);
  cudaFree(ptr);  // never throws: called from destructors
}

void copy_host_to_device(void* dst, const void* src, size_t bytes, int device) {
  set_device(device);
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyHostToDevice), "copy host->device");
}

void copy_device_to_host(void* dst, const void* src, size_t bytes, int device) {
  set_device(device);
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToHost), "copy device->host");
}

void copy_device_to_device(void* dst, const void* src, size_t bytes, int device) {
  set_device(device);
  cuda_check(cudaMemcpy(dst, src, bytes, cudaMemcpyDeviceToDevice), "copy device->device");
}

void saxpy_on_device(int64_t n, float a, const float* x, float* y, int device) {
  if (n == 0) return;
  const size_t bytes = size_t(n) * sizeof(float);
  float* dx = static_cast<float*>(device_malloc(bytes, device));
  float* dy = static_cast<float*>(device_malloc(bytes, device));
  try {
    copy_host_to_device(dx, x, bytes, device);
    copy_host_to_device(dy, y, bytes, device);
    const int threads = 256;
    const int blocks = int(std::min<int64_t>((n + threads - 1) / threads, 65535));
    saxpy_kernel<<<blocks, threads>>>(n, a, dx, dy);
    cuda_check(cudaGetLastError(), "saxpy_kernel launch");
    copy_device_to_host(y, dy, bytes, device);
  } catch (...) {
    device_free(dx, device);
    device_free(dy, device);
    throw;
  }
  device_free(dx, device);
  device_free(dy, device);
}

}  // namespace engine::cuda
