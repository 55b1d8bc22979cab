#include "tensor/cpu_allocator.h"

#include <malloc.h>
#include <pthread.h>

#include <cstdlib>
#include <mutex>
#include <unordered_map>
#include <vector>

#include "tensor/check.h"
#include "tensor/cuda/runtime.h"
#include "tensor/limit_words.h"

#if defined(__SANITIZE_ADDRESS__)
#define ENGINE_CPU_CACHE 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define ENGINE_CPU_CACHE 0
#endif
#endif
#ifndef ENGINE_CPU_CACHE
#define ENGINE_CPU_CACHE 1
#endif

namespace engine {

namespace {

constexpr size_t kSmallest = 32 * 1024;         // below this, malloc's own caches are as fast
constexpr size_t kMaxCached = size_t(1) << 30;  // past this, freed blocks go back at once

struct Cache {
  std::mutex mu;
  std::unordered_map<size_t, std::vector<void*>> free;  // size class -> blocks
  CpuMemoryStats stats;
};

Cache& cache() {
  static Cache* c = [] {
    auto* fresh = new Cache;  // never destroyed: tensors may be freed during static destruction
    // A fork while another thread holds the lock would leave the child's copy locked
    // forever: hold it across fork, so both sides start with it free.
    pthread_atfork([] { cache().mu.lock(); }, [] { cache().mu.unlock(); }, [] { cache().mu.unlock(); });
    return fresh;
  }();
  return *c;
}

// By default glibc serves blocks above 128 KiB-32 MiB with fresh mmap'd pages, so each
// such allocation pays a page fault and a zeroing per 4 KiB touched. Keeping large blocks
// in the heap (and not trimming it) lets malloc reuse the memory the cache hands back.
const bool kHeapTuned = [] {
  mallopt(M_MMAP_THRESHOLD, 1 << 30);
  mallopt(M_TRIM_THRESHOLD, 1 << 30);
  return true;
}();

void* system_alloc(size_t bytes) {
  (void)kHeapTuned;
  // aligned_alloc wants a size that is a multiple of the alignment; never ask for 0 bytes.
  const size_t rounded = (std::max<size_t>(bytes, 1) + 63) / 64 * 64;
  void* p = std::aligned_alloc(64, rounded);
  if (!p) {  // the cache may hold what is missing: give it back and try once more
    cpu_empty_cache();
    p = std::aligned_alloc(64, rounded);
  }
  ENGINE_REQUIRE(p != nullptr, "[Storage] out of memory allocating ", bytes, " bytes on cpu",
                 address_space_limit_words());
  return p;
}

}  // namespace

void* cpu_malloc(size_t bytes) {
  if (!ENGINE_CPU_CACHE || bytes < kSmallest) return system_alloc(bytes);
  const size_t size = cuda::allocation_size(bytes);  // the same classes as the GPU's
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free.find(size);
    if (it != c.free.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.stats.cached_bytes -= size;
      ++c.stats.cache_hits;
      return p;
    }
    ++c.stats.system_allocs;
  }
  return system_alloc(size);
}

void cpu_free(void* p, size_t bytes) {
  if (!p) return;
  if (!ENGINE_CPU_CACHE || bytes < kSmallest) return std::free(p);
  const size_t size = cuda::allocation_size(bytes);
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    if (c.stats.cached_bytes + size <= kMaxCached) {
      c.free[size].push_back(p);
      c.stats.cached_bytes += size;
      return;
    }
  }
  std::free(p);
}

CpuMemoryStats cpu_memory_stats() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.stats;
}

bool cpu_cache_enabled() { return ENGINE_CPU_CACHE != 0; }

void cpu_empty_cache() {
  Cache& c = cache();
  std::unordered_map<size_t, std::vector<void*>> blocks;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    blocks.swap(c.free);
    c.stats.cached_bytes = 0;
  }
  for (auto& [size, list] : blocks)
    for (void* p : list) std::free(p);
  // The heap is never trimmed on its own (kHeapTuned): without this, the blocks would go
  // back to malloc but the process would hold their pages as before.
  malloc_trim(0);
}

}  // namespace engine
