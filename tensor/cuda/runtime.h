// The small slice of the CUDA runtime the engine uses, behind a header that compiles
// everywhere. Built with nvcc when the toolkit is found (runtime.cu), otherwise from
// runtime_none.cc, whose functions report that this build has no CUDA.
//
//   if (engine::cuda::device_count() == 0) {
//     std::cout << "no GPU: " << engine::cuda::unavailable_reason() << "\n";
//   } else {
//     float* p = static_cast<float*>(engine::cuda::device_malloc(1024, 0));
//     ...
//     engine::cuda::device_free(p, 0);
//   }
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

namespace engine::cuda {

// True when this binary was compiled with nvcc (the toolkit was found at build time).
bool built_with_cuda();

// The number of usable GPUs; 0 when there is no driver, no device, or no CUDA in the build.
int device_count();

// Why device_count() is 0, in words ("built without CUDA", or the driver's own message).
std::string unavailable_reason();

// Makes `device` current for this thread; throws engine::Error naming it if it is out of range.
void set_device(int device);

// Device memory on GPU `device`. Throws engine::Error on failure (with the byte count).
void* device_malloc(size_t bytes, int device);
void device_free(void* ptr, int device);

// Synchronous copies between host and the device memory of GPU `device`.
void copy_host_to_device(void* dst, const void* src, size_t bytes, int device);
void copy_device_to_host(void* dst, const void* src, size_t bytes, int device);
void copy_device_to_device(void* dst, const void* src, size_t bytes, int device);

// A first kernel, kept to prove the toolchain end to end: y = a * x + y on GPU `device`,
// for host arrays x and y of n floats (copied in and out).
void saxpy_on_device(int64_t n, float a, const float* x, float* y, int device);

}  // namespace engine::cuda
