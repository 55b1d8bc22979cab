// The caching allocator behind cuda::device_malloc / device_free (runtime.h).
//
// cudaMalloc and cudaFree are slow (tens of microseconds, and cudaFree waits for the whole
// GPU to go idle). A training step allocates and frees the same sizes every step, so we
// keep freed blocks and hand them out again:
//   - each request is rounded up to a size class: multiples of 512 bytes up to 4 KiB,
//     then four classes per power of two (a block wastes at most a quarter of itself);
//   - freed blocks go to a free list per (device, class), never back to CUDA;
//   - a request is served from its class's free list when one is there, else by cudaMalloc;
//   - if cudaMalloc runs out of memory, every free block goes back to CUDA and it tries once more.
// All engine kernels run on one stream per device, so a block freed on the host may be
// handed out again at once: any kernel that still reads it was queued earlier on the same
// stream and runs before the new owner's kernels.
//
// A CUDA graph (runtime.h) replays its kernels on the addresses they had when it was
// captured, long after the host freed them. So while a graph is captured, its blocks come
// from a pool of its own: every block handed out, and every block freed (the graph may
// still read it), belongs to the pool and goes back only to the pool's free lists, where
// nothing outside the capture can take it. When the graph is destroyed, the pool's blocks
// return to the common cache. The bookkeeping is block_cache.h (plain C++, tested on the CPU).
#include <cuda_runtime.h>

#include <mutex>

#include "tensor/cuda/block_cache.h"
#include "tensor/cuda/check.cuh"
#include "tensor/cuda/runtime.h"

namespace engine::cuda {

namespace {

struct DeviceCache {
  std::mutex mu;
  BlockCache blocks;
  MemoryStats stats;

  void release_free_blocks(int device) {
    cudaSetDevice(device);
    for (auto [p, size] : blocks.drain_free()) {
      cudaFree(p);
      stats.cached -= size;
      ++stats.cuda_frees;
    }
  }
};

bool poison = false;

DeviceCache& cache(int device) {
  static DeviceCache caches[kMaxDevices];
  ENGINE_REQUIRE(device >= 0 && device < kMaxDevices, "[cuda] device index ", device, " is out of range");
  return caches[device];
}

}  // namespace

void* device_malloc(size_t bytes, int device) {
  if (bytes == 0) return nullptr;
  const size_t size = allocation_size(bytes);
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  void* p = c.blocks.take(size);
  if (!p) {
    set_device(device);  // only here: a block from the cache needs no CUDA call at all
    cudaError_t status = cudaMalloc(&p, size);
    if (status == cudaErrorMemoryAllocation) {  // give the cache back to CUDA and try again
      cudaGetLastError();
      c.release_free_blocks(device);
      status = cudaMalloc(&p, size);
    }
    if (status != cudaSuccess) {
      cudaGetLastError();
      throw Error("[cuda] cudaMalloc of " + std::to_string(bytes) + " bytes on cuda:" + std::to_string(device) +
                  " failed: " + cudaGetErrorString(status) + " (the engine holds " + std::to_string(c.stats.allocated) +
                  " bytes in tensors, " + std::to_string(c.stats.cached) + " bytes in all)");
    }
    ++c.stats.cuda_mallocs;
    c.stats.cached += size;
  }
  if (poison) check(cudaMemsetAsync(p, 0xFF, size, stream_of(device)), "poisoning a new block");
  c.blocks.hand_out(p, size);
  c.stats.allocated += size;
  c.stats.peak_allocated = std::max(c.stats.peak_allocated, c.stats.allocated);
  return p;
}

void device_free(void* ptr, int device) {
  if (ptr == nullptr) return;
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  const size_t size = c.blocks.size_of(ptr);
  // Not ours: never happens for Storage, ignored rather than thrown (destructors).
  if (c.blocks.give_back(ptr)) c.stats.allocated -= size;
}

int begin_graph_pool(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  ENGINE_REQUIRE(!c.blocks.capturing(), "[cuda] a graph is already being captured on cuda:", device);
  return c.blocks.begin_pool();
}

void end_graph_pool(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.end_pool();
}

void release_graph_pool(int device, int pool) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  c.blocks.release_pool(pool);
}

void poison_new_memory(bool on) { poison = on; }

MemoryStats memory_stats(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

void reset_peak_memory(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  c.stats.peak_allocated = c.stats.allocated;
}

void empty_cache(int device) {
  DeviceCache& c = cache(device);
  std::lock_guard<std::mutex> lock(c.mu);
  check(cudaStreamSynchronize(stream_of(device)), "waiting for the GPU before emptying the cache");
  c.release_free_blocks(device);
}

}  // namespace engine::cuda
