// A reference-counted block of memory on one device. Tensors share Storage: a view is a new
// Tensor (shape, strides, offset) over the same Storage, so views never copy.
//
//   auto s = std::make_shared<Storage>(1024, Device::cpu());  // 1024 bytes, 64-byte aligned
//   float* p = static_cast<float*>(s->data());
#pragma once

#include <cstddef>
#include <memory>

#include "tensor/device.h"

namespace engine {

class Storage {
 public:
  // Allocates `nbytes` on `device` (CPU memory is 64-byte aligned for SIMD).
  Storage(size_t nbytes, Device device);
  // Wraps memory someone else owns (shared memory, for one); `owner` is kept alive as long
  // as this Storage and released with it. Nothing is freed by the Storage itself.
  Storage(void* data, size_t nbytes, Device device, std::shared_ptr<void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  void* data() const { return data_; }
  size_t nbytes() const { return nbytes_; }
  Device device() const { return device_; }

  // Frees the memory but keeps this Storage, and every tensor viewing it, in existence;
  // reallocate() gives it fresh memory of the same size (contents undefined). FSDP frees a
  // unit's unsharded parameters this way after forward: the tensors autograd saved still
  // view this Storage and see the parameters again once they are gathered back into it.
  // Reading a released storage is an error (Tensor::bytes says so). Owned memory only.
  void release();
  void reallocate();
  bool released() const { return released_; }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;  // set for wrapped memory
  bool released_ = false;
};

}  // namespace engine
