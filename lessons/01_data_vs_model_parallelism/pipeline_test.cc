// Lesson 1's claim: splitting the model across two processes computes exactly what the
// whole model computes in one process (same loss, same updated weights), and it learns.
#include "lessons/01_data_vs_model_parallelism/pipeline.h"
#include "catch2/catch.hpp"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::nn;

TEST_CASE("the split MLP equals the whole MLP in one process, step for step") {
  const lesson1::SplitOptions o{.steps = 30};
  // One process, the whole model.
  auto whole = lessons::toy_mlp(o.seed);
  SGD opt(whole->parameters(), {.lr = o.lr, .momentum = 0.9});
  std::vector<double> losses;
  for (int s = 0; s < o.steps; ++s) {
    Tensor x, y;
    lessons::toy_batch(s, o.batch, o.seed, &x, &y);
    opt.zero_grad();
    Variable loss = cross_entropy((*whole)(Variable(x)), y);
    loss.backward();
    opt.step();
    losses.push_back(loss.item());
  }
  // Two processes (as threads), the model split between them.
  std::vector<lesson1::SplitResult> parts(2);
  engine::testing::run_threads(
      2, [&](engine::dist::ProcessGroupTCP& g) { parts[size_t(g.rank())] = lesson1::train_split_mlp(g, o); });
  RANK_REQUIRE(parts[1].losses.size() == losses.size());
  for (size_t s = 0; s < losses.size(); ++s) RANK_REQUIRE(parts[1].losses[s] == Approx(losses[s]).epsilon(1e-5));
  // Rank 0's layer is the whole model's first layer; rank 1's are its last two.
  auto close = [](const Tensor& a, const Tensor& b) { return max(abs(a - b)).item() < 1e-5; };
  RANK_REQUIRE(close(parts[0].part->parameters()[0].data(), whole->parameters()[0].data()));
  RANK_REQUIRE(close(parts[1].part->parameters()[2].data(), whole->parameters()[4].data()));
  RANK_REQUIRE(losses.back() < losses.front());  // and it learns
}
