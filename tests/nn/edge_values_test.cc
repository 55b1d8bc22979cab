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

TEST_CASE("log_softmax of bfloat16 or float16 is the float32 log_softmax of its values, rounded once") {
  // In 16 bits, x - logsumexp(x) rounded logsumexp first: outputs near 0 were off by up to
  // 9 units in the last place (bf16 logits of magnitude ~5: -0.25 where -0.2412 is right).
  Generator g(3);
  for (DType half : {DType::BFloat16, DType::Float16}) {
    Variable w(randn({6, 10}, &g) * 4.0, true);
    const Variable y = log_softmax(autograd::to(w, half));
    REQUIRE(y.data().dtype() == half);
    Variable values(w.data().to(half).to(DType::Float32), true);  // what the 16-bit tensor holds
    const Variable reference = log_softmax(values);
    REQUIRE(y.data().to(DType::Float32).to_vector<float>() ==
            reference.data().to(half).to(DType::Float32).to_vector<float>());
    // Backward in float32 too: within 16-bit rounding of the float32 gradient.
    const Tensor c = randn({6, 10}, &g);
    sum(mul(autograd::to(y, DType::Float32), Variable(c))).backward();
    sum(mul(reference, Variable(c))).backward();
    const double err = max(abs(w.grad() - values.grad())).item(), scale = max(abs(values.grad())).item();
    REQUIRE(err <= 4e-3 * scale);  // the cotangent and the result each rounded to 16 bits
  }
}

TEST_CASE("log_softmax over an empty last dim is empty, as PyTorch's, and passes its gradient") {
  Variable x(zeros({2, 0}), /*requires_grad=*/true);
  const Variable y = log_softmax(x);  // torch.log_softmax(torch.zeros(2, 0), -1): tensor([], size=(2, 0))
  REQUIRE(y.shape() == Shape{2, 0});
  sum(y).backward();
  REQUIRE(x.grad().shape() == Shape{2, 0});
  REQUIRE(log_softmax(Variable(zeros({0, 3}))).shape() == Shape{0, 3});
}
