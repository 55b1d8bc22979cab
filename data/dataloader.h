// DataLoader: walks a Dataset in batches, in the order its Sampler gives.
//
//   auto ds = std::make_shared<TensorDataset>(images, labels);
//   DataLoader loader(ds, {.batch_size = 64, .shuffle = true, .seed = 0});
//   for (int epoch = 0; epoch < 3; ++epoch)
//     for (const Example& batch : loader) { ... batch.input, batch.target ... }
//
// Each range-for is one epoch: it asks the sampler for a fresh index list. shuffle uses a
// RandomSampler seeded with `seed`; pass your own sampler (e.g. a DistributedSampler)
// instead of shuffle. drop_last drops a final batch smaller than batch_size.
#pragma once

#include <memory>
#include <vector>

#include "data/dataset.h"
#include "data/sampler.h"

namespace engine::data {

struct DataLoaderOptions {
  int64_t batch_size = 1;
  bool shuffle = false;
  bool drop_last = false;
  uint64_t seed = 0;
};

class DataLoader {
 public:
  DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
             std::shared_ptr<Sampler> sampler = nullptr);

  // Batches per epoch.
  int64_t size() const;
  Sampler& sampler() { return *sampler_; }

  class Iterator {
   public:
    Iterator(const DataLoader* loader, std::shared_ptr<const std::vector<int64_t>> order, int64_t pos)
        : loader_(loader), order_(std::move(order)), pos_(pos) {}
    Example operator*() const;
    Iterator& operator++();
    bool operator!=(const Iterator& other) const { return pos_ != other.pos_; }

   private:
    int64_t next_position() const;
    const DataLoader* loader_;
    std::shared_ptr<const std::vector<int64_t>> order_;
    int64_t pos_;
  };
  // Starts an epoch: draws the sampler's index list.
  Iterator begin();
  Iterator end() const;

 private:
  int64_t end_position() const;  // where the last (kept) batch ends
  std::shared_ptr<const Dataset> dataset_;
  DataLoaderOptions options_;
  std::shared_ptr<Sampler> sampler_;
};

}  // namespace engine::data
