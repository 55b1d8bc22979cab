// Host memory for tensors: 64-byte aligned blocks, and a cache of freed large blocks.
//
// A training step allocates and frees the same large tensors (activations, gradients) every
// step. Freed blocks of 32 KiB and more go on a free list per size class (four classes per
// power of two, as the GPU allocator's), and the next request of that class takes one back
// without calling malloc. Smaller blocks go straight to malloc, whose own per-thread cache
// serves them as fast. Under AddressSanitizer nothing is cached, so every use after free is
// still caught.
//
//   void* p = engine::cpu_malloc(1 << 20);    // 1 MiB, 64-byte aligned
//   engine::cpu_free(p, 1 << 20);             // cached: the next 1 MiB request reuses it
//   engine::cpu_memory_stats().cached_bytes;  // 1 MiB
//   engine::cpu_empty_cache();                // back to the system (RSS falls)
#pragma once

#include <cstddef>
#include <cstdint>

namespace engine {

// Throws engine::Error naming the size when memory runs out. 0 bytes gives a valid block.
void* cpu_malloc(size_t bytes);
// `bytes` must be the size the block was allocated with.
void cpu_free(void* p, size_t bytes);

struct CpuMemoryStats {
  size_t cached_bytes = 0;    // freed blocks held for reuse
  int64_t cache_hits = 0;     // requests served from the cache
  int64_t system_allocs = 0;  // large requests that went to malloc
};
CpuMemoryStats cpu_memory_stats();
// False under AddressSanitizer, where every block goes straight back to the system.
bool cpu_cache_enabled();
// Returns every cached block to the system.
void cpu_empty_cache();

}  // namespace engine
