// Samplers decide which examples an epoch visits and in what order. The DataLoader asks
// its sampler for the epoch's index list once per pass, so a DistributedSampler (each rank
// its own slice, reshuffled by set_epoch) plugs in without changing the loader.
//
//   SequentialSampler s(5);           // 0 1 2 3 4, every epoch
//   RandomSampler r(5, /*seed=*/7);   // a new permutation each epoch, the same sequence
//                                     // of permutations for the same seed
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/random.h"

namespace engine::data {

class Sampler {
 public:
  virtual ~Sampler() = default;
  // The indices of the next epoch, in visiting order.
  virtual std::vector<int64_t> indices() = 0;
  // How many indices indices() returns.
  virtual int64_t size() const = 0;
};

class SequentialSampler : public Sampler {
 public:
  explicit SequentialSampler(int64_t n);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }

 private:
  int64_t n_;
};

class RandomSampler : public Sampler {
 public:
  RandomSampler(int64_t n, uint64_t seed = 0);
  std::vector<int64_t> indices() override;
  int64_t size() const override { return n_; }
  Generator& generator() { return gen_; }  // for checkpointing its state

 private:
  int64_t n_;
  Generator gen_;
};

// A uniformly random permutation of 0..n-1 (Fisher-Yates) drawn from `gen`.
std::vector<int64_t> random_permutation(int64_t n, Generator& gen);

}  // namespace engine::data
