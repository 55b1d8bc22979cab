// The small model and data the DDP tests share: an MLP 6-16-4 built from a seed, and 48
// examples that every rank and every single-process reference read alike.
//
//   auto model = ddp_testing::mlp(1);
//   ddp_testing::Data d;  // d.x (48, 6), d.y (48,) in [0, 4)
//   std::vector<float> w = ddp_testing::flat(*model);
#pragma once

#include <memory>
#include <vector>

#include "nn/layers.h"
#include "tensor/ops.h"
#include "tensor/random.h"

namespace engine::ddp_testing {

using nn::Linear;
using nn::Module;
using nn::ModulePtr;
using nn::ReLU;
using nn::Sequential;

inline std::shared_ptr<Sequential> mlp(uint64_t seed) {
  Generator g(seed);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(6, 16, true, &g), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 4, true, &g)});
}

// The whole dataset of the test: 48 examples, the same in every rank and in the reference.
struct Data {
  Tensor x, y;
  Data() {
    Generator g(7);
    x = randn({48, 6}, &g);
    y = randint(0, 4, {48}, &g);
  }
};

inline std::vector<float> flat(Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

}  // namespace engine::ddp_testing
