// Gradients at the singular points of each op, against what PyTorch 1.13 gives for the same
// inputs (printed by torch on this machine; see the comment on each line).
#include <cmath>
#include <limits>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/testing/same_values.h"

using namespace engine;
using namespace engine::autograd;
using V = std::vector<float>;

using engine::testing::kInf;
using engine::testing::kNaN;
using engine::testing::require_same;

TEST_CASE("pow(x, 0) has gradient 0 everywhere, x = 0 included") {
  Variable x(tensor({0, 1}), true);
  sum(pow(x, 0.0)).backward();
  require_same(x.grad(), {0, 0});  // torch: (y**0).backward() -> [0, 0]
  Variable z(tensor({0, 1}), true);
  sum(pow(z, 0.5)).backward();
  require_same(z.grad(), {kInf, 0.5});  // torch: [inf, 0.5]
}

TEST_CASE("pow(x, 0.5) and pow(x, -0.5): gradients at -inf and -0 as PyTorch's") {
  Variable x(tensor({-kInf, -0.0f}), true);
  sum(pow(x, 0.5)).backward();
  require_same(x.grad(), {kNaN, -kInf});  // torch: [nan, -inf]
  Variable y(tensor({-kInf, -0.0f}), true);
  sum(pow(y, -0.5)).backward();
  require_same(y.grad(), {0, -kInf});  // torch: [-0.0, -inf]
  REQUIRE(std::signbit(y.grad().to_vector<float>()[0]));
  Variable z(tensor({-kInf, -0.0f}), true);
  sum(pow(z, 1.5)).backward();
  require_same(z.grad(), {kNaN, 0});  // torch: [nan, -0.0]
  REQUIRE(std::signbit(z.grad().to_vector<float>()[1]));
}

TEST_CASE("pow(x, y) with tensors: 0 where PyTorch masks the singular point") {
  Variable x(tensor({0, 1}), true), y(tensor({2, 0.5}), true);
  sum(pow(x, y)).backward();
  require_same(x.grad(), {0, 0.5});  // torch: [0, 0.5]
  require_same(y.grad(), {0, 0});    // torch: [0, 0] (0^y ln 0 is taken as 0 for y >= 0)
  Variable a(tensor({0, 0}), true), b(tensor({0, -1}), true);
  sum(pow(a, b)).backward();
  require_same(a.grad(), {0, -kInf});  // torch: [0, -inf]
  require_same(b.grad(), {0, -kInf});  // torch: [0, -inf]
}

TEST_CASE("sqrt, log, abs, div at 0 give PyTorch's limits") {
  Variable s(tensor({0, 4}), true);
  sum(sqrt(s)).backward();
  require_same(s.grad(), {kInf, 0.25});
  Variable l(tensor({0, 1}), true);
  sum(log(l)).backward();
  require_same(l.grad(), {kInf, 1});
  Variable a(tensor({0, -1}), true);
  sum(abs(a)).backward();
  require_same(a.grad(), {0, -1});
  Variable n(tensor({1, 0}), true), d(tensor({0, 0}), true);
  sum(n / d).backward();
  require_same(n.grad(), {kInf, kInf});
  require_same(d.grad(), {-kInf, kNaN});
}

TEST_CASE("max and maximum: ties split the gradient, a NaN maximum takes it") {
  Variable t(tensor({1, 1}), true);
  max(t).backward();
  require_same(t.grad(), {0.5, 0.5});  // torch: [0.5, 0.5]
  Variable y(tensor({1, 1}), true), z(tensor({1, 2}), true);
  sum(maximum(y, z)).backward();
  require_same(y.grad(), {0.5, 0});  // torch: [0.5, 0]
  require_same(z.grad(), {0.5, 1});  // torch: [0.5, 1]
  Variable m(tensor({1, kNaN}), true);
  max(m).backward();
  require_same(m.grad(), {0, 1});  // torch: [0, 1]
  Variable r(tensor({kNaN, -1, 2, 0}), true);
  sum(relu(r)).backward();
  require_same(r.grad(), {1, 0, 1, 0});  // torch: [1, 0, 1, 0]
  Variable c(tensor({0.5, -2, 2}), true);
  sum(clamp(c, -1, 0.5)).backward();
  require_same(c.grad(), {1, 0, 0});  // torch: [1, 0, 0]
}
