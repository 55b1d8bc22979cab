// Test helper: the sharding tests' model and data. Linear 6-7, ReLU, Linear 7-3: 73
// parameters in units of 49 and 24, divisible by neither 2 nor 3 (so shards are padded).
//
//   auto m = testing::small_mlp();
//   testing::loss_on(*m, rank, step).backward();   // rank's own batch of step
#pragma once

#include <memory>

#include "nn/layers.h"
#include "nn/loss.h"
#include "tensor/ops.h"

namespace engine::testing {

inline std::shared_ptr<nn::Sequential> small_mlp() {
  Generator g(2);
  return std::make_shared<nn::Sequential>(std::vector<nn::ModulePtr>{std::make_shared<nn::Linear>(6, 7, true, &g),
                                                                     std::make_shared<nn::ReLU>(),
                                                                     std::make_shared<nn::Linear>(7, 3, true, &g)});
}

// Five rows of 6 features and their classes, different for every rank and step.
inline nn::Variable loss_on(nn::Module& m, int rank, int step) {
  Generator g(uint64_t(100 * step + rank));
  const Tensor x = randn({5, 6}, &g), y = randint(0, 3, {5}, &g);
  return nn::cross_entropy(m(nn::Variable(x)), y);
}

}  // namespace engine::testing
