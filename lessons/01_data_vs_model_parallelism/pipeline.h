// Lesson 1: model parallelism. The MLP 784-256-256-10 is split across two processes:
// rank 0 holds the first layer, rank 1 the other two and the loss. Activations travel
// forward (rank 0 -> rank 1) and their gradients backward (rank 1 -> rank 0), with plain
// send/recv. Each process holds and updates only its own part of the model.
//
//   auto result = train_split_mlp(group, {.steps = 100});   // on both ranks
//
// The model and the batches are the toy task of lessons/common/lesson.h (toy_mlp, toy_batch).
//
// Contrast with data parallelism (lesson 2): there every rank holds the whole model and a
// slice of the batch; here every rank holds a slice of the model and the whole batch.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "dist/process_group.h"
#include "nn/layers.h"

namespace lesson1 {

struct SplitOptions {
  int steps = 100;
  int64_t batch = 64;
  double lr = 0.05;
  uint64_t seed = 0;
};

struct SplitResult {
  std::vector<double> losses;                    // rank 1 only (it computes the loss)
  std::shared_ptr<engine::nn::Sequential> part;  // this rank's layers after training
};

// Trains rank 0's layer 1 and rank 1's layers 2-3 together. `group` must have 2 ranks.
SplitResult train_split_mlp(engine::dist::ProcessGroup& group, const SplitOptions& options);

}  // namespace lesson1
