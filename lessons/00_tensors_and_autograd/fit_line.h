// Lesson 0's program: learn a line y = w x + b from noisy points with autograd and plain
// gradient descent. The demo prints each step; the test checks that it finds the line.
//
//   FitResult r = fit_line({.steps = 200, .lr = 0.1});
//   // r.w close to 3, r.b close to -2, r.losses falling
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

namespace lesson0 {

struct FitOptions {
  int steps = 200;
  double lr = 0.1;
  uint64_t seed = 0;
  // Called after each step with (step, loss, w, b); the demo prints from here.
  std::function<void(int, double, double, double)> on_step;
};

struct FitResult {
  double w, b;
  std::vector<double> losses;
};

// The true line is y = 3x - 2; the data are 256 points with x ~ U(-1, 1) and noise N(0, 0.1).
FitResult fit_line(const FitOptions& options);

}  // namespace lesson0
