// Lesson 0's claim: autograd + gradient descent recovers the line the data came from, and
// the loss falls to the noise level (0.1^2 = 0.01).
#include "lessons/00_tensors_and_autograd/fit_line.h"
#include "catch2/catch.hpp"

TEST_CASE("gradient descent with autograd finds y = 3x - 2") {
  lesson0::FitOptions options;
  options.steps = 300;
  const lesson0::FitResult r = lesson0::fit_line(options);
  REQUIRE(r.w == Approx(3).margin(0.05));
  REQUIRE(r.b == Approx(-2).margin(0.05));
  REQUIRE(r.losses.front() > 1.0);
  REQUIRE(r.losses.back() < 0.02);
  for (size_t i = 1; i < r.losses.size(); ++i) REQUIRE(r.losses[i] <= r.losses[i - 1] + 1e-6);  // monotone here
}
