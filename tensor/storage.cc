#include "tensor/storage.h"

#include "tensor/check.h"
#include "tensor/cpu_allocator.h"
#include "tensor/cuda/runtime.h"

namespace engine {

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  if (device.is_cuda()) {
    data_ = cuda::device_malloc(nbytes, device.index);
    return;
  }
  data_ = cpu_malloc(nbytes);
}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owner_) return;  // wrapped memory: its owner frees it
  if (device_.is_cuda()) {
    cuda::device_free(data_, device_.index);
  } else {
    cpu_free(data_, nbytes_);
  }
}

}  // namespace engine
