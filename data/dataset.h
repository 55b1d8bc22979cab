// Datasets: anything that can say how many examples it has and hand out example i.
//
//   TensorDataset ds(images, labels);     // example i = (images[i], labels[i])
//   Example e = ds.get(3);                // e.input, e.target
//   Example b = ds.get_batch({0, 5, 9});  // the same three examples stacked along dim 0
//
// DataLoader (dataloader.h) draws indices from a Sampler and asks the dataset for batches.
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/tensor.h"

namespace engine::data {

struct Example {
  Tensor input;
  Tensor target;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  // Example i, for 0 <= i < size(); throws engine::Error naming i and the size otherwise.
  virtual Example get(int64_t i) const = 0;
  // The examples at `indices`, each field stacked along a new dim 0. The default calls
  // get() for each; datasets held in memory override it with one gather.
  virtual Example get_batch(const std::vector<int64_t>& indices) const;
};

// Stacks same-shaped tensors along a new leading dim: k tensors of shape S -> (k, S...).
Tensor stack(const std::vector<Tensor>& tensors);

// Examples held as two tensors whose dim 0 indexes the example.
class TensorDataset : public Dataset {
 public:
  TensorDataset(Tensor inputs, Tensor targets);
  int64_t size() const override { return inputs_.size(0); }
  Example get(int64_t i) const override;
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const Tensor& inputs() const { return inputs_; }
  const Tensor& targets() const { return targets_; }

 private:
  Tensor inputs_, targets_;
};

// Rows `indices` of `t` (along dim 0), copied into a new contiguous tensor.
Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& indices);

}  // namespace engine::data
