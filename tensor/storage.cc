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

void Storage::release() {
  ENGINE_REQUIRE(!owner_, "[Storage::release] this memory belongs to someone else (shared memory?)");
  if (released_) return;
  if (device_.is_cuda())
    cuda::device_free(data_, device_.index);
  else
    cpu_free(data_, nbytes_);
  data_ = nullptr;
  released_ = true;
}

void Storage::reallocate() {
  if (!released_) return;
  data_ = device_.is_cuda() ? cuda::device_malloc(nbytes_, device_.index) : cpu_malloc(nbytes_);
  released_ = false;
}

Storage::~Storage() {
  if (owner_ || released_) return;  // wrapped memory: its owner frees it; released: nothing held
  if (device_.is_cuda()) {
    cuda::device_free(data_, device_.index);
  } else {
    cpu_free(data_, nbytes_);
  }
}

}  // namespace engine
