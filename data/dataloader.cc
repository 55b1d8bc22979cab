#include "data/dataloader.h"

#include <algorithm>

namespace engine::data {

DataLoader::DataLoader(std::shared_ptr<const Dataset> dataset, DataLoaderOptions options,
                       std::shared_ptr<Sampler> sampler)
    : dataset_(std::move(dataset)), options_(options), sampler_(std::move(sampler)) {
  ENGINE_REQUIRE(dataset_ != nullptr, "[DataLoader] dataset is null");
  ENGINE_REQUIRE(options_.batch_size > 0, "[DataLoader] batch_size must be positive, got ", options_.batch_size);
  ENGINE_REQUIRE(!(sampler_ && options_.shuffle),
                 "[DataLoader] pass either shuffle=true or a sampler, not both (the sampler decides the order)");
  if (!sampler_) {
    if (options_.shuffle)
      sampler_ = std::make_shared<RandomSampler>(dataset_->size(), options_.seed);
    else
      sampler_ = std::make_shared<SequentialSampler>(dataset_->size());
  }
}

int64_t DataLoader::end_position() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b * b : n;
}

int64_t DataLoader::size() const {
  const int64_t n = sampler_->size(), b = options_.batch_size;
  return options_.drop_last ? n / b : n / b + (n % b != 0);  // not (n + b - 1) / b: b may be near INT64_MAX
}

DataLoader::Iterator DataLoader::begin() {
  auto order = std::make_shared<const std::vector<int64_t>>(sampler_->indices());
  // A sampler of one's own must keep its two answers together: the loader counts batches
  // (size()) and walks the list (indices()), and an epoch must be the same by both.
  ENGINE_REQUIRE(int64_t(order->size()) == sampler_->size(), "[DataLoader] the sampler's indices() gave ",
                 order->size(), " indices but its size() says ", sampler_->size(),
                 ": a Sampler's size() must count what indices() returns");
  return Iterator(this, std::move(order), end_position() == 0 ? end_position() : 0);
}

DataLoader::Iterator DataLoader::end() const { return Iterator(this, nullptr, end_position()); }

Example DataLoader::Iterator::operator*() const {
  const int64_t stop = next_position();
  const std::vector<int64_t> batch(order_->begin() + pos_, order_->begin() + stop);
  return loader_->dataset_->get_batch(batch);
}

DataLoader::Iterator& DataLoader::Iterator::operator++() {
  pos_ = next_position();
  return *this;
}

// Where this batch ends: batch_size on, or the end (compared before adding, so that a
// batch_size near INT64_MAX cannot overflow).
int64_t DataLoader::Iterator::next_position() const {
  const int64_t end = loader_->end_position();
  return end - pos_ <= loader_->options_.batch_size ? end : pos_ + loader_->options_.batch_size;
}

}  // namespace engine::data
