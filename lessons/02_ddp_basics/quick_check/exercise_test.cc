// Lesson 2's quick check: after average_gradients, every rank holds the mean gradient.
#include "lessons/02_ddp_basics/quick_check/exercise.h"
#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;

TEST_CASE("every rank ends with the mean of the ranks' gradients") {
  for (int world : {2, 3}) {
    INFO("world size " << world);
    std::vector<std::vector<float>> after(static_cast<size_t>(world));
    testing::run_threads(world, [&](dist::ProcessGroupTCP& g) {
      // Rank r's gradients: (r + 1) * (1, 2, 3) and (r + 1) * 10.
      autograd::Variable w(zeros({3}), true), b(zeros({1}), true);
      w.set_grad(from_vector(std::vector<float>{1, 2, 3}) * double(g.rank() + 1));
      b.set_grad(from_vector(std::vector<float>{10}) * double(g.rank() + 1));
      lesson2::average_gradients({w, b}, g);
      auto& out = after[size_t(g.rank())];
      for (int i = 0; i < 3; ++i) out.push_back(float(w.grad().select(0, i).item()));
      out.push_back(float(b.grad().item()));
    });
    // The mean of 1 .. world is (world + 1) / 2.
    const float m = float(world + 1) / 2;
    for (auto& out : after) {
      RANK_REQUIRE(out.size() == 4);
      RANK_CHECK(out[0] == Approx(1 * m));
      RANK_CHECK(out[1] == Approx(2 * m));
      RANK_CHECK(out[2] == Approx(3 * m));
      RANK_CHECK(out[3] == Approx(10 * m));
    }
  }
}
