// NaN and Inf through the layers' own kernels (pooling, log-softmax, cross-entropy),
// against what PyTorch 1.13 returns for the same inputs (printed by torch on this machine).
#include <cmath>
#include <limits>

#include "catch2/catch.hpp"
#include "nn/functional.h"
#include "nn/loss.h"
#include "tensor/ops.h"
#include "tests/testing/same_values.h"

using namespace engine;
using namespace engine::nn;
using V = std::vector<float>;

using engine::testing::kInf;
using engine::testing::kNaN;
using engine::testing::require_same;

TEST_CASE("max_pool2d: a NaN in the window wins, and takes the gradient") {
  Variable x(tensor({1, kNaN, 5, 2, 2, 3, kInf, 0}).reshape({1, 1, 2, 4}), true);
  Variable y = max_pool2d(x, 2, 2);
  require_same(y.data(), {kNaN, kInf});  // torch: [nan, inf]
  sum(y).backward();
  require_same(x.grad(), {0, 1, 0, 0, 0, 0, 1, 0});
}

TEST_CASE("log_softmax and cross_entropy: Inf and NaN logits as in PyTorch") {
  require_same(log_softmax(Variable(tensor({kInf, 1}).reshape({1, 2}))).data(), {kNaN, kNaN});  // torch: [nan, nan]
  require_same(log_softmax(Variable(tensor({-kInf, 1}).reshape({1, 2}))).data(), {-kInf, 0});   // torch: [-inf, 0]
  require_same(log_softmax(Variable(tensor({kNaN, 1}).reshape({1, 2}))).data(), {kNaN, kNaN});
  const Tensor zero = from_vector(std::vector<int64_t>{0}), one = from_vector(std::vector<int64_t>{1});
  require_same(cross_entropy(Variable(tensor({kNaN, 1}).reshape({1, 2})), one).data(), {kNaN});   // torch: nan
  require_same(cross_entropy(Variable(tensor({kInf, 1}).reshape({1, 2})), zero).data(), {kNaN});  // torch: nan
  require_same(cross_entropy(Variable(tensor({-kInf, 1}).reshape({1, 2})), one).data(), {0});     // torch: 0
}

TEST_CASE("log_softmax over an empty last dim is empty, as PyTorch's, and passes its gradient") {
  Variable x(zeros({2, 0}), /*requires_grad=*/true);
  const Variable y = log_softmax(x);  // torch.log_softmax(torch.zeros(2, 0), -1): tensor([], size=(2, 0))
  REQUIRE(y.shape() == Shape{2, 0});
  sum(y).backward();
  REQUIRE(x.grad().shape() == Shape{2, 0});
  REQUIRE(log_softmax(Variable(zeros({0, 3}))).shape() == Shape{0, 3});
}
