// The caching allocator's bookkeeping (allocator.cu), in plain C++ so that it is built and
// tested without a GPU: which blocks are handed out, which are free for reuse, and which
// belong to a CUDA graph's pool.
//
//   BlockCache cache;
//   void* p = cache.take(size);              // a free block of this size class, or nullptr
//   if (!p) p = cudaMalloc'd block;          // (allocator.cu)
//   cache.hand_out(p, size);
//   cache.give_back(p);                      // free again, for the next take(size)
//
// While a graph is captured (begin_pool .. end_pool) every block handed out and every
// block given back belongs to that graph's pool: take() serves a capture from its pool
// first, and nothing outside the capture is ever served from a pool, since the graph's
// replays keep using those addresses. release_pool returns the pool's blocks to all.
#pragma once

#include <cstddef>
#include <unordered_map>
#include <utility>
#include <vector>

namespace engine::cuda {

class BlockCache {
 public:
  // A free block of `size` (a size class): from the capturing graph's pool, else from the
  // common free lists; nullptr when neither has one.
  void* take(size_t size);
  // Records a block as handed out (to the capturing graph's pool, if one is capturing).
  void hand_out(void* p, size_t size);
  // Returns a handed-out block to the free lists it belongs to; false if `p` is not one.
  bool give_back(void* p);
  size_t size_of(void* p) const;  // a handed-out block's size class, 0 if none

  int begin_pool();  // a capture starts: a new pool, which take/hand_out/give_back use
  void end_pool();   // the capture ends: its pool keeps its blocks
  // The graph is gone: its free blocks join the common lists, and those still handed out
  // will when they are given back.
  void release_pool(int pool);
  int capturing() const { return capturing_; }

  // Empties the common free lists (to be returned to CUDA), as (block, size) pairs.
  std::vector<std::pair<void*, size_t>> drain_free();

 private:
  using FreeLists = std::unordered_map<size_t, std::vector<void*>>;  // size class -> blocks
  static void* pop(FreeLists& lists, size_t size);

  FreeLists free_;
  std::unordered_map<void*, size_t> live_;  // handed out -> its size class
  int capturing_ = 0;                       // the pool of the graph being captured, or 0
  int next_pool_ = 1;
  std::unordered_map<int, FreeLists> pools_;  // a graph's free blocks
  std::unordered_map<void*, int> pool_of_;    // handed out from a pool -> the pool
};

}  // namespace engine::cuda
