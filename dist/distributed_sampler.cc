#include "dist/distributed_sampler.h"

#include <numeric>

#include "dist/dist.h"
#include "tensor/check.h"

namespace engine::dist {

DistributedSampler::DistributedSampler(int64_t n, DistributedSamplerOptions o) : n_(n), options_(o) {
  replicas_ = o.num_replicas >= 0 ? o.num_replicas : get_world_size();
  rank_ = o.rank >= 0 ? o.rank : get_rank();
  ENGINE_REQUIRE(replicas_ >= 1, "[DistributedSampler] num_replicas must be >= 1, got ", replicas_);
  ENGINE_REQUIRE(rank_ >= 0 && rank_ < replicas_, "[DistributedSampler] rank ", rank_, " is outside 0..",
                 replicas_ - 1);
  ENGINE_REQUIRE(n >= 0, "[DistributedSampler] dataset size must be >= 0, got ", n);
  // ceil(N / R), or with drop_last (and N not divisible by R) ceil((N - R) / R) = floor(N / R).
  num_samples_ =
      o.drop_last && n % replicas_ != 0 ? (n - replicas_ + replicas_ - 1) / replicas_ : (n + replicas_ - 1) / replicas_;
  if (num_samples_ < 0) num_samples_ = 0;
  total_ = num_samples_ * replicas_;
}

std::vector<int64_t> DistributedSampler::indices() {
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
