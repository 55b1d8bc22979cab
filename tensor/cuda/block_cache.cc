// BlockCache (block_cache.h): the caching allocator's bookkeeping, without CUDA.
#include "tensor/cuda/block_cache.h"

#include <iterator>

namespace engine::cuda {

void* BlockCache::pop(FreeLists& lists, size_t size) {
  auto it = lists.find(size);
  if (it == lists.end() || it->second.empty()) return nullptr;
  void* p = it->second.back();
  it->second.pop_back();
  return p;
}

void* BlockCache::take(size_t size) {
  void* p = capturing_ ? pop(pools_[capturing_], size) : nullptr;
  return p ? p : pop(free_, size);
}

void BlockCache::hand_out(void* p, size_t size) {
  live_[p] = size;
  if (capturing_) pool_of_[p] = capturing_;
}

bool BlockCache::give_back(void* p) {
  auto it = live_.find(p);
  if (it == live_.end()) return false;
  int pool = capturing_;  // given back during a capture: the graph may use it on every replay
  if (auto owner = pool_of_.find(p); owner != pool_of_.end()) {
    pool = owner->second;
    pool_of_.erase(owner);
  }
  (pool ? pools_[pool] : free_)[it->second].push_back(p);
  live_.erase(it);
  return true;
}

size_t BlockCache::size_of(void* p) const {
  auto it = live_.find(p);
  return it == live_.end() ? 0 : it->second;
}

int BlockCache::begin_pool() {
  capturing_ = next_pool_++;
  pools_[capturing_];
  return capturing_;
}

void BlockCache::end_pool() { capturing_ = 0; }

void BlockCache::release_pool(int pool) {
  if (capturing_ == pool) capturing_ = 0;
  if (auto it = pools_.find(pool); it != pools_.end()) {
    for (auto& [size, blocks] : it->second) free_[size].insert(free_[size].end(), blocks.begin(), blocks.end());
    pools_.erase(it);
  }
  for (auto owner = pool_of_.begin(); owner != pool_of_.end();)
    owner = owner->second == pool ? pool_of_.erase(owner) : std::next(owner);
}

std::vector<std::pair<void*, size_t>> BlockCache::drain_free() {
  std::vector<std::pair<void*, size_t>> out;
  for (auto& [size, blocks] : free_) {
    for (void* p : blocks) out.emplace_back(p, size);
    blocks.clear();
  }
  return out;
}

}  // namespace engine::cuda
