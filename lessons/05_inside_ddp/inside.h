// What every step of the "inside DDP" track shares: one training run, defined once. The
// toy MLP (lessons/common/lesson.h) trains for kSteps steps of SGD with momentum on
// batches of kBatch rows; with N ranks (N dividing kBatch), rank r takes rows
// [r * kBatch / N, (r+1) * kBatch / N) of each batch. Every step of the track must
// reproduce the baseline's numbers.
//
//   auto model = lessons::toy_mlp(0);
//   nn::SGD opt(model->parameters(), inside::sgd_options());
//   Tensor x, y;
//   inside::my_rows(step, rank, world, &x, &y);
#pragma once

#include <memory>
#include <vector>

#include "nn/layers.h"
#include "nn/sgd.h"

namespace inside {

inline constexpr int kSteps = 20;
inline constexpr int64_t kBatch = 64;

inline engine::nn::SGDOptions sgd_options() { return {.lr = 0.05, .momentum = 0.9}; }

// Step `step`'s batch, or rank's share of it.
void my_rows(int step, int rank, int world, engine::Tensor* x, engine::Tensor* y);

struct Run {
  std::shared_ptr<engine::nn::Sequential> model;
  std::vector<double> losses;  // the whole batch's mean loss at every step
};

// The baseline: one process, the whole batch, kSteps steps.
Run baseline();

}  // namespace inside
