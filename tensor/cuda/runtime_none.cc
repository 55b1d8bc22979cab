// CPU-only build of tensor/cuda/runtime.h: no CUDA toolkit was found when this was built.
#include <string>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("[cuda] ") + what +
              ": this build has no CUDA (no toolkit was found at build time; set CUDA_PATH and rebuild)");
}
}  // namespace

bool built_with_cuda() { return false; }
int device_count() { return 0; }
std::string unavailable_reason() { return "built without CUDA (no toolkit found at build time)"; }
void set_device(int) { no_cuda("set_device"); }
void* device_malloc(size_t, int) { no_cuda("device_malloc"); }
void device_free(void*, int) {}
void copy_host_to_device(void*, const void*, size_t, int) { no_cuda("copy_host_to_device"); }
void copy_device_to_host(void*, const void*, size_t, int) { no_cuda("copy_device_to_host"); }
void copy_device_to_device(void*, const void*, size_t, int) { no_cuda("copy_device_to_device"); }
void saxpy_on_device(int64_t, float, const float*, float*, int) { no_cuda("saxpy_on_device"); }

}  // namespace engine::cuda
