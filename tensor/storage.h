// A reference-counted block of memory on one device. Tensors share Storage: a view is a new
// Tensor (shape, strides, offset) over the same Storage, so views never copy.
//
//   auto s = std::make_shared<Storage>(1024, Device::cpu());  // 1024 bytes, 64-byte aligned
//   float* p = static_cast<float*>(s->data());
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
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

  // Counts in-place writes through the tensor API (copy_, fill_, add_, mul_, optimizer
  // steps), as PyTorch's version counter: autograd compares it to tell that a parameter was
  // overwritten between the forward that used it and the backward. Collectives and kernels
  // writing their own outputs do not count.
  uint64_t version() const { return version_.load(std::memory_order_relaxed); }
  void bump_version() { version_.fetch_add(1, std::memory_order_relaxed); }

 private:
  void* data_ = nullptr;
  size_t nbytes_ = 0;
  Device device_;
  std::shared_ptr<void> owner_;  // set for wrapped memory
  bool released_ = false;
  std::atomic<uint64_t> version_{0};  // atomic: DDP's worker thread writes gradients beside the caller
};

}  // namespace engine
