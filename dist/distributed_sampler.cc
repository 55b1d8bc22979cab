#include "dist/distributed_sampler.h"

#include <cstdio>
#include <numeric>

#include "dist/dist.h"
#include "tensor/check.h"

namespace engine::dist {

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions o) : n_(n), options_(o) {
  replicas_ = o.num_replicas == -1 ? get_world_size() : o.num_replicas;  // -1 alone means "from dist::"
  rank_ = o.rank == -1 ? get_rank() : o.rank;
  ENGINE_REQUIRE(replicas_ >= 1, "[DistributedSampler] num_replicas must be >= 1, got ", replicas_);
  ENGINE_REQUIRE(rank_ >= 0 && rank_ < replicas_, "[DistributedSampler] rank ", rank_, " is outside 0..",
                 replicas_ - 1);
  ENGINE_REQUIRE(n >= 0, "[DistributedSampler] dataset size must be >= 0, got ", n);
  // ceil(N / R), or with drop_last floor(N / R) (PyTorch's ceil((N - R) / R) where R does not
  // divide N), written so that no intermediate sum can overflow.
  num_samples_ = n / replicas_ + (!o.drop_last && n % replicas_ != 0);
  ENGINE_REQUIRE(!__builtin_mul_overflow(num_samples_, int64_t(replicas_), &total_),
                 "[DistributedSampler] dataset size ", n, " padded to a multiple of ", replicas_,
                 " replicas does not fit int64");
}

std::vector<int64_t> DistributedSampler::indices() {
  // A second pass over one shuffled epoch: the loop lacks set_epoch (PyTorch says nothing).
  if (options_.shuffle && epoch_ == last_drawn_ && !warned_ && rank_ == 0) {
    std::fprintf(stderr,
                 "[DistributedSampler] epoch %lld's order was drawn again: set_epoch() was not called since the last "
                 "pass, so this pass repeats its order on every rank. Call sampler.set_epoch(epoch) at the start of "
                 "each epoch (said once)\n",
                 (long long)epoch_);
    warned_ = true;
  }
  last_drawn_ = epoch_;
  return order();
}

std::vector<int64_t> DistributedSampler::order() const {
  std::vector<int64_t> order;
  if (options_.shuffle) {
    Generator g(options_.seed + uint64_t(epoch_));  // identical on every rank
    order = data::random_permutation(n_, g);
  } else {
    order.resize(size_t(n_));
    std::iota(order.begin(), order.end(), 0);
  }
  if (options_.drop_last) {
    order.resize(size_t(total_));  // cut the tail
  } else {
    // Pad by repeating the start (repeatedly, if the dataset is smaller than the padding).
    for (size_t i = 0; int64_t(order.size()) < total_ && n_ > 0; ++i) order.push_back(order[i]);
  }
  std::vector<int64_t> mine;
  for (int64_t i = rank_; i < total_; i += replicas_) mine.push_back(order[size_t(i)]);
  return mine;
}

}  // namespace engine::dist
