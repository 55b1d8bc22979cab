#include "tensor/storage.h"

#include <malloc.h>

#include <cstdlib>
#include <string>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine {

namespace {
// Training allocates and frees the same large tensors every step. By default glibc serves
// blocks above 128 KiB-32 MiB with fresh mmap'd pages, so each step pays a page fault and
// a zeroing per 4 KiB touched. Keeping large blocks in the heap (and not trimming it) lets
// the next step reuse the memory the last one freed: a caching allocator for free.
const bool kHeapTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();
}  // namespace

Storage::Storage(size_t nbytes, Device device) : nbytes_(nbytes), device_(device) {
  (void)kHeapTuned;
  if (device.is_cuda()) {
    data_ = cuda::device_malloc(nbytes, device.index);
    return;
  }
  // aligned_alloc wants a size that is a multiple of the alignment; never ask for 0 bytes.
  const size_t rounded = (std::max<size_t>(nbytes, 1) + 63) / 64 * 64;
  data_ = std::aligned_alloc(64, rounded);
  ENGINE_REQUIRE(data_ != nullptr, "[Storage] out of memory allocating ", nbytes, " bytes on cpu");
}

Storage::Storage(void* data, size_t nbytes, Device device, std::shared_ptr<void> owner)
    : data_(data), nbytes_(nbytes), device_(device), owner_(std::move(owner)) {}

Storage::~Storage() {
  if (owner_) return;  // wrapped memory: its owner frees it
  if (device_.is_cuda()) {
    cuda::device_free(data_, device_.index);
  } else {
    std::free(data_);
  }
}

}  // namespace engine
