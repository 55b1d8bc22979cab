// Every differentiable op's backward against central finite differences, through the one
// shared helper in tests/testing/gradcheck.h, including broadcast and non-contiguous inputs.
#include "tests/testing/gradcheck.h"

using namespace engine;
using namespace engine::autograd;
using engine::testing::check_gradients;
using Vs = std::vector<Variable>;

namespace {
Generator gen(42);
Tensor rn(const Shape& s) { return randn(s, &gen); }
// Values in [lo, hi): keeps log, sqrt, div and pow away from their singular points.
Tensor in_range(const Shape& s, float lo, float hi) { return rand(s, &gen) * double(hi - lo) + double(lo); }
// Values whose magnitude is at least 0.1: keeps relu, abs, clamp away from their kinks.
Tensor off_kinks(const Shape& s) {
  Tensor x = rn(s);
  return where(lt(abs(x), scalar_tensor(0.1)), x + 0.3, x);
}
}  // namespace

TEST_CASE("gradients of binary ops, with broadcasting") {
  check_gradients("add", [](const Vs& v) { return v[0] + v[1]; }, {rn({3, 4}), rn({4})});
  check_gradients("sub", [](const Vs& v) { return v[0] - v[1]; }, {rn({3, 1}), rn({1, 4})});
  check_gradients("mul", [](const Vs& v) { return v[0] * v[1]; }, {rn({2, 3, 4}), rn({3, 1})});
  check_gradients("div", [](const Vs& v) { return v[0] / v[1]; }, {rn({3, 4}), in_range({4}, 0.5, 2)});
  check_gradients("pow", [](const Vs& v) { return pow(v[0], v[1]); }, {in_range({3, 4}, 0.5, 2), rn({4})});
  check_gradients("maximum", [](const Vs& v) { return maximum(v[0], v[1]); }, {rn({3, 4}), rn({3, 4}) + 0.05});
  check_gradients("minimum", [](const Vs& v) { return minimum(v[0], v[1]); }, {rn({3, 4}), rn({4})});
  const Tensor cond = gt(rn({3, 4}), zeros({}));
  check_gradients("where", [cond](const Vs& v) { return where(cond, v[0], v[1]); }, {rn({3, 4}), rn({4})});
  check_gradients("scalar ops", [](const Vs& v) { return (2.0 * v[0] - 1.0) / 3.0 + 1.0 / (v[0] * v[0] + 1.0); },
                  {rn({5})});
}

TEST_CASE("gradients of unary ops") {
  check_gradients("neg", [](const Vs& v) { return -v[0]; }, {rn({3, 4})});
  check_gradients("abs", [](const Vs& v) { return abs(v[0]); }, {off_kinks({3, 4})});
  check_gradients("exp", [](const Vs& v) { return exp(v[0]); }, {rn({3, 4})});
  check_gradients("log", [](const Vs& v) { return log(v[0]); }, {in_range({3, 4}, 0.5, 3)});
  check_gradients("sqrt", [](const Vs& v) { return sqrt(v[0]); }, {in_range({3, 4}, 0.5, 3)});
  check_gradients("tanh", [](const Vs& v) { return tanh(v[0]); }, {rn({3, 4})});
  check_gradients("sigmoid", [](const Vs& v) { return sigmoid(v[0]); }, {rn({3, 4})});
  check_gradients("relu", [](const Vs& v) { return relu(v[0]); }, {off_kinks({3, 4})});
  check_gradients("pow scalar", [](const Vs& v) { return pow(v[0], 3.0); }, {rn({3, 4})});
  check_gradients("clamp", [](const Vs& v) { return clamp(v[0], -0.5, 0.5); }, {off_kinks({4, 4}) * 0.8});
}

TEST_CASE("gradients of reductions") {
  check_gradients("sum all", [](const Vs& v) { return sum(v[0]); }, {rn({3, 4})});
  check_gradients("sum dim", [](const Vs& v) { return sum(v[0], {1}); }, {rn({3, 4, 2})});
  check_gradients("sum keepdim", [](const Vs& v) { return sum(v[0], {0, 2}, true); }, {rn({3, 4, 2})});
  check_gradients("mean", [](const Vs& v) { return mean(v[0], {-1}); }, {rn({3, 4})});
  check_gradients("max", [](const Vs& v) { return max(v[0], {1}); }, {rn({3, 5})});
  check_gradients("min", [](const Vs& v) { return min(v[0], {0}, true); }, {rn({3, 5})});
  check_gradients("max all", [](const Vs& v) { return max(v[0]); }, {rn({4})});
  check_gradients("var", [](const Vs& v) { return var(v[0], {1}); }, {rn({3, 6})});
  check_gradients("var biased", [](const Vs& v) { return var(v[0], {}, false, 0); }, {rn({7})});
}

TEST_CASE("gradients of matmul, plain, batched, broadcast and transposed") {
  check_gradients("matmul", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({3, 5}), rn({5, 2})});
  check_gradients("matmul batched", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({2, 3, 4}), rn({2, 4, 2})});
  check_gradients("matmul broadcast", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({2, 3, 4}), rn({4, 5})});
  // Vector operands: matrix @ vector, vector @ matrix, a dot product (0-d) and batches.
  check_gradients("matmul mv", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({3, 5}), rn({5})});
  check_gradients("matmul vm", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({5}), rn({5, 2})});
  check_gradients("matmul dot", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({4}), rn({4})});
  check_gradients("matmul batched mv", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({2, 3, 4}), rn({4})});
  check_gradients("matmul vector batched", [](const Vs& v) { return matmul(v[0], v[1]); }, {rn({3}), rn({2, 3, 4})});
  // Non-contiguous operands: the op transposes its inputs before multiplying.
  check_gradients("matmul transposed", [](const Vs& v) { return matmul(transpose(v[0], 0, 1), transpose(v[1], 0, 1)); },
                  {rn({5, 3}), rn({2, 5})});
}

TEST_CASE("gradients of views and copies") {
  check_gradients("reshape", [](const Vs& v) { return reshape(v[0], {4, 3}) * 2.0; }, {rn({3, 4})});
  check_gradients("transpose", [](const Vs& v) { return transpose(v[0], 0, 2) * 2.0; }, {rn({2, 3, 4})});
  check_gradients("permute", [](const Vs& v) { return permute(v[0], {1, 2, 0}) * 2.0; }, {rn({2, 3, 4})});
  check_gradients("narrow", [](const Vs& v) { return narrow(v[0], 1, 1, 2) * 2.0; }, {rn({3, 4})});
  check_gradients("slice", [](const Vs& v) { return slice(v[0], 0, 0, 5, 2) * 2.0; }, {rn({5, 2})});
  check_gradients("select", [](const Vs& v) { return select(v[0], 1, 2) * 2.0; }, {rn({3, 4})});
  check_gradients("expand", [](const Vs& v) { return expand(v[0], {2, 3, 4}) * 2.0; }, {rn({3, 1})});
  check_gradients("squeeze", [](const Vs& v) { return squeeze(v[0], 1) * 2.0; }, {rn({3, 1, 2})});
  check_gradients("unsqueeze", [](const Vs& v) { return unsqueeze(v[0], 0) * 2.0; }, {rn({3, 2})});
  check_gradients("contiguous", [](const Vs& v) { return contiguous(transpose(v[0], 0, 1)) * 2.0; }, {rn({3, 2})});
  // Zero-size: gradients are zero-size too.
  Variable z(zeros({0, 3}), true);
  sum(z * 2.0).backward();
  REQUIRE(z.grad().shape() == Shape{0, 3});
}

TEST_CASE("a composite expression: a two-layer MLP with a squared loss") {
  const Tensor x = rn({4, 3});
  check_gradients("mlp",
                  [x](const Vs& v) {
                    Variable h = tanh(matmul(Variable(x), v[0]) + v[1]);
                    return mean(pow(matmul(h, v[2]), 2.0));
                  },
                  {rn({3, 5}), rn({5}), rn({5, 2})});
}
