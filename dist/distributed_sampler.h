// DistributedSampler: gives each rank its own slice of the dataset, the same way PyTorch's
// does, so that N ranks together see every example once per epoch.
//
//   DistributedSampler sampler(dataset->size());        // num_replicas, rank: from dist::
//   DataLoader loader(dataset, {.batch_size = 64}, std::make_shared<...>(sampler));
//   for (int epoch = 0; epoch < epochs; ++epoch) {
//     sampler.set_epoch(epoch);                          // a new shuffle, shared by all ranks
//     for (auto& batch : loader) ...
//   }
//
// The rule (PyTorch's): with N examples and R replicas, each rank takes ceil(N / R)
// indices (with drop_last and N not divisible by R: floor(N / R)). The shuffled order is a
// permutation drawn from a generator seeded with seed + epoch, the same on every rank; it
// is padded by repeating its start (or, with drop_last, cut) to R times that, and rank r
// takes positions r, r + R, r + 2R, ... Without set_epoch every epoch repeats one order:
// rank 0 then says so (once) when a shuffled order is drawn a second time for one epoch.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "data/sampler.h"

namespace engine::dist {

struct DistributedSamplerOptions {
  int num_replicas = -1;  // -1: dist::get_world_size()
  int rank = -1;          // -1: dist::get_rank()
  bool shuffle = true;
  uint64_t seed = 0;  // must be the same on every rank
  bool drop_last = false;
};

class DistributedSampler : public data::Sampler {
 public:
  explicit DistributedSampler(int64_t dataset_size, DistributedSamplerOptions options = {});
  // This rank's indices for the current epoch: one pass. Drawing the same shuffled epoch
  // twice is what a forgotten set_epoch looks like, and is warned about once.
  std::vector<int64_t> indices() override;
  // The same list, to look at (record or print) without counting as a pass.
  std::vector<int64_t> order() const;
  int64_t size() const override { return num_samples_; }
  void set_epoch(int64_t epoch) { epoch_ = epoch; }
  int64_t epoch() const { return epoch_; }

 private:
  int64_t n_, num_samples_, total_;
  int replicas_, rank_;
  DistributedSamplerOptions options_;
  int64_t epoch_ = 0;
  std::optional<int64_t> last_drawn_;  // the epoch indices() last drew
  bool warned_ = false;
};

}  // namespace engine::dist
