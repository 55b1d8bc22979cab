// One training step of the MLP 784-256-256-10 (SGD momentum 0.9, cross-entropy, random
// data, one thread): the same workload as ../shared/reference/torch_mlp_step.py, printed
// as the same JSON line so bench/train_step.py can set the two side by side.
//
//   bazel run //bench:train_step -- --batch 64
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

#include "bench/median.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

int main(int argc, char** argv) {
  int64_t batch = 64;
  int steps = 200, rounds = 5;
  Flags flags("train_step", "Times the MLP training step (784-256-256-10, SGD momentum) on one thread.");
  flags.add("--batch", &batch, 1, 1 << 16, "images per step");
  flags.add("--steps", &steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.parse_or_exit(argc, argv);
  manual_seed(0);
  Sequential model({std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
                    std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
  SGD opt(model.parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = randn({batch, 784});
  const Tensor y = randint(0, 10, {batch});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(model(Variable(x)), y).backward();
    opt.step();
  };
  for (int i = 0; i < 20; ++i) step();
  std::vector<double> times;
  for (int r = 0; r < rounds; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < steps; ++i) step();
    times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
  }
  const double s = median(times);
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  std::printf(
      "{\"impl\": \"engine\", \"model\": \"mlp-784-256-256-10\", \"batch\": %lld, \"threads\": 1, "
      "\"step_ms\": %.4f, \"samples_per_s\": %.1f, \"peak_rss_mb\": %.1f}\n",
      (long long)batch, s * 1e3, double(batch) / s, usage.ru_maxrss / 1024.0);
  return 0;
}
