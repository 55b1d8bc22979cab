// The caching allocator's bookkeeping (tensor/cuda/block_cache.h), on the CPU with stand-in
// addresses: blocks are reused by size class, and a CUDA graph's blocks (handed out or
// given back while it was captured) are never handed to anything outside that capture
// until the graph releases them.
#include <algorithm>
#include <set>

#include "catch2/catch.hpp"
#include "tensor/cuda/block_cache.h"

using engine::cuda::BlockCache;

namespace {
char arena[64];
void* block(int i) { return &arena[i]; }  // distinct stand-in addresses
}  // namespace

TEST_CASE("a given-back block is handed out again for its size class only") {
  BlockCache c;
  CHECK(c.take(512) == nullptr);
  c.hand_out(block(0), 512);
  CHECK(c.size_of(block(0)) == 512);
  CHECK(c.give_back(block(0)));
  CHECK_FALSE(c.give_back(block(0)));  // not handed out any more
  CHECK_FALSE(c.give_back(block(9)));  // never ours
  CHECK(c.take(1024) == nullptr);
  CHECK(c.take(512) == block(0));
  CHECK(c.take(512) == nullptr);
}

TEST_CASE("a graph's blocks stay the graph's until it is released") {
  BlockCache c;
  c.hand_out(block(1), 512), c.give_back(block(1));  // free before the capture
  c.hand_out(block(2), 512);                         // held before it, freed during it
  c.hand_out(block(7), 512);                         // held throughout (a parameter, say)
  c.hand_out(block(6), 1024);                        // freed during it and not reused there
  const int pool = c.begin_pool();
  CHECK(c.capturing() == pool);
  CHECK(c.take(512) == block(1));  // a capture may use a common free block...
  c.hand_out(block(1), 512);       // ...which is the graph's from now on
  c.hand_out(block(3), 512);       // new memory for the capture
  CHECK(c.give_back(block(2)));    // the graph may read it again on every replay
  CHECK(c.take(512) == block(2));  // within the capture it can be reused, in stream order
  c.hand_out(block(2), 512);
  CHECK(c.give_back(block(2)));
  CHECK(c.give_back(block(6)));  // the graph read it before it was freed: replays will again
  c.end_pool();
  CHECK(c.take(1024) == nullptr);
  CHECK(c.capturing() == 0);
  // Outside the capture nothing of the pool is handed out, even once its tensors are freed.
  CHECK(c.take(512) == nullptr);
  CHECK(c.give_back(block(1)));
  CHECK(c.give_back(block(7)));  // never the graph's: back to everyone
  CHECK(c.take(512) == block(7));
  CHECK(c.take(512) == nullptr);
  CHECK(c.drain_free().empty());  // a pool's free blocks are not returned to CUDA either
  // A second capture does not reach into the first graph's pool.
  const int second = c.begin_pool();
  CHECK(second != pool);
  CHECK(c.take(512) == nullptr);
  c.end_pool();
  c.release_pool(second);
  // The first graph goes: its free blocks (1, 2, 6) are everyone's, and block 3, still held,
  // will be when it is given back.
  c.release_pool(pool);
  std::set<void*> freed;
  for (void* p = c.take(512); p; p = c.take(512)) freed.insert(p);
  CHECK(freed == std::set<void*>{block(1), block(2)});
  CHECK(c.take(1024) == block(6));
  CHECK(c.give_back(block(3)));
  CHECK(c.take(512) == block(3));
}

TEST_CASE("drain_free empties the common lists, with each block's size") {
  BlockCache c;
  c.hand_out(block(4), 512), c.hand_out(block(5), 2048);
  c.give_back(block(4)), c.give_back(block(5));
  auto drained = c.drain_free();
  std::sort(drained.begin(), drained.end(), [](auto& a, auto& b) { return a.second < b.second; });
  REQUIRE(drained.size() == 2);
  CHECK(drained[0] == std::make_pair(block(4), size_t(512)));
  CHECK(drained[1] == std::make_pair(block(5), size_t(2048)));
  CHECK(c.take(512) == nullptr);
}
