// Layers and losses: hand-computed forwards, finite-difference backwards, PyTorch's init.
#include <cmath>

#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "tests/testing/gradcheck.h"

using namespace engine;
using namespace engine::nn;
using engine::testing::check_gradients;
using Vs = std::vector<Variable>;
using V = std::vector<float>;

TEST_CASE("Linear computes x W^T + b") {
  Linear fc(3, 2);
  fc.weight.set_data(from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3}));
  fc.bias.set_data(tensor({10, 20}));
  Variable y = fc(Variable(from_vector(V{1, 0, -1, 2, 1, 0}, {2, 3})));
  // row 0: [1-3, 4-6] + b = [8, 18]; row 1: [2+2, 8+5] + b = [14, 33]
  REQUIRE(y.data().to_vector<float>() == V{8, 18, 14, 33});
  REQUIRE_THROWS_WITH(fc(Variable(zeros({2, 4}))),
                      Catch::Contains("[Linear] expects input with last dim 3, got shape (2,4)"));
}

TEST_CASE("Linear starts where PyTorch's would: U(-1/sqrt(in), 1/sqrt(in))") {
  Generator g(0);
  Linear fc(400, 300, true, &g);
  const double k = 1.0 / 20.0;
  REQUIRE(max(abs(fc.weight.data())).item() <= k);
  REQUIRE(max(abs(fc.bias.data())).item() <= k);
  // A uniform on [-k, k] has variance k^2 / 3.
  REQUIRE(var(fc.weight.data()).item() == Approx(k * k / 3).epsilon(0.02));
  REQUIRE(fc.weight.shape() == Shape{300, 400});
  REQUIRE_FALSE(Linear(3, 2, false).bias.defined());
}

TEST_CASE("Linear's gradients match finite differences") {
  check_gradients("linear",
                  [](const Vs& v) {
                    Linear fc(4, 3);
                    fc.weight = v[1];
                    fc.bias = v[2];
                    return fc(v[0]);
                  },
                  {randn({5, 4}), randn({3, 4}), randn({3})});
}

TEST_CASE("linear on batched input matches matmul + bias, forward and backward") {
  check_gradients("linear 3-D", [](const Vs& v) { return linear(v[0], v[1], v[2]); },
                  {randn({2, 3, 4}), randn({5, 4}), randn({5})});
  check_gradients("linear no bias", [](const Vs& v) { return linear(v[0], v[1], Variable()); },
                  {randn({3, 4}), randn({2, 4})});
  const Tensor x = randn({2, 3, 4}), w = randn({5, 4}), b = randn({5});
  const Tensor expect = matmul(x, w.transpose(0, 1)) + b;
  REQUIRE(max(abs(linear(Variable(x), Variable(w), Variable(b)).data() - expect)).item() < 1e-5);
  REQUIRE_THROWS_WITH(linear(Variable(x), Variable(w), Variable(zeros({4}))),
                      Catch::Contains("[linear] bias must be (5,)"));
}

TEST_CASE("cross_entropy by hand, and its gradient") {
  // Equal logits over 2 classes: -log(1/2) = log 2.
  REQUIRE(cross_entropy(Variable(zeros({1, 2})), from_vector(std::vector<int64_t>{0})).item() == Approx(std::log(2.0)));
  // logits [1, 2, 3], target 2: lse = 3 + log(e^-2 + e^-1 + 1) and loss = lse - 3.
  const double expect = std::log(std::exp(-2.0) + std::exp(-1.0) + 1.0);
  REQUIRE(cross_entropy(Variable(from_vector(V{1, 2, 3}, {1, 3})), from_vector(std::vector<int64_t>{2})).item() ==
          Approx(expect));
  // Large logits stay finite (the max is subtracted before exp).
  REQUIRE(std::isfinite(
      cross_entropy(Variable(from_vector(V{1000, -1000}, {1, 2})), from_vector(std::vector<int64_t>{1})).item()));
  const Tensor targets = from_vector(std::vector<int64_t>{0, 3, 1, 3});
  check_gradients("cross_entropy", [targets](const Vs& v) { return cross_entropy(v[0], targets); }, {randn({4, 5})});
  check_gradients("log_softmax", [](const Vs& v) { return log_softmax(v[0]); }, {randn({3, 4})});
  // cross_entropy equals the composite -mean(sum(log_softmax * one_hot)).
  const Tensor x = randn({4, 5});
  const Tensor one_hot = eq(targets.unsqueeze(1), arange(0, 5, 1, DType::Int64));
  const double composite = -mean(sum(log_softmax(Variable(x)).data() * one_hot, {1})).item();
  REQUIRE(cross_entropy(Variable(x), targets).item() == Approx(composite).epsilon(1e-5));
}

TEST_CASE("cross_entropy leaves out rows whose target is ignore_index (-100), as PyTorch's") {
  const Tensor x = randn({5, 4});
  // Rows 1 and 3 are padding: the loss and gradient are those of rows 0, 2 and 4 alone.
  const Tensor t_kept = from_vector(std::vector<int64_t>{3, 0, 1});
  Variable all(x, true), some(x.slice(0, 0, 5, 2).contiguous(), true);
  Variable l_all = cross_entropy(all, from_vector(std::vector<int64_t>{3, -100, 0, -100, 1}));
  Variable l_some = cross_entropy(some, t_kept);
  REQUIRE(l_all.item() == l_some.item());
  l_all.backward(), l_some.backward();
  for (int64_t r = 0; r < 3; ++r)
    for (int64_t j = 0; j < 4; ++j) CHECK(all.grad().at({2 * r, j}) == some.grad().at({r, j}));
  for (int64_t j = 0; j < 4; ++j) CHECK((all.grad().at({1, j}) == 0 && all.grad().at({3, j}) == 0));
  const Tensor t2 = from_vector(std::vector<int64_t>{3, 2, 0, 2, 1});
  check_gradients("cross_entropy ignoring class 2", [t2](const Vs& v) { return cross_entropy(v[0], t2, 2); }, {x});
  // Another ignore_index, here a real class: rows of class 2 are left out, -100 is an error.
  CrossEntropyLoss skip_class_2{2};
  REQUIRE(skip_class_2(Variable(x), t2).item() == l_some.item());
  REQUIRE_THROWS_WITH(cross_entropy(Variable(x), from_vector(std::vector<int64_t>{3, -100, 0, -100, 1}), 2),
                      Catch::Contains("target -100 at index 1 is out of range for 4 classes (and is not the "
                                      "ignore_index, 2)"));
  // Every row left out: 0 / 0 is NaN, as in PyTorch, and the gradient is 0.
  Variable none(x, true);
  Variable l_none = cross_entropy(none, full({5}, -100, DType::Int64));
  CHECK(std::isnan(l_none.item()));
  l_none.backward();
  CHECK(max(abs(none.grad())).item() == 0);
}

TEST_CASE("cross_entropy of (N, C, d) logits and of one (C,) example, as PyTorch's") {
  // Values printed by PyTorch 1.13: x = sin(0.37 * arange(12)).reshape(2, 3, 2), targets
  // [[2, 0], [-100, 1]]: a class per position, one position left out, the mean over three.
  std::vector<float> xs;
  for (int i = 0; i < 12; ++i) xs.push_back(std::sin(0.37f * float(i)));
  Variable x(from_vector(xs, {2, 3, 2}), true);
  Variable loss = cross_entropy(x, from_vector(std::vector<int64_t>{2, 0, -100, 1}, {2, 2}));
  REQUIRE(loss.item() == Approx(1.174759030342102).epsilon(1e-6));
  loss.backward();
  const V torch_grad{0.0587916225, -0.2597072721, 0.1153864786, 0.1255975068,  -0.1741780937, 0.1341097951,
                     0.0,          0.1897317767,  0.0,          -0.2401776016, 0.0,           0.0504458398};
  const V grad = x.grad().to_vector<float>();
  for (size_t i = 0; i < grad.size(); ++i) CHECK(grad[i] == Approx(torch_grad[i]).margin(1e-6));
  const Tensor t3 = from_vector(std::vector<int64_t>{0, 3, 1, 2, 3, 0}, {2, 3});
  check_gradients("cross_entropy over positions", [t3](const Vs& v) { return cross_entropy(v[0], t3); },
                  {randn({2, 4, 3})});
  // One example: logits (3,), a 0-d target.
  Variable one(from_vector(V{0.5, -1, 2}), true);
  Variable l1 = cross_entropy(one, full({}, 2, DType::Int64));
  REQUIRE(l1.item() == Approx(0.24131132662296295).epsilon(1e-6));
  l1.backward();
  const V one_grad{0.17529039, 0.03911257, -0.21440297};
  for (int64_t j = 0; j < 3; ++j) CHECK(one.grad().at({j}) == Approx(one_grad[size_t(j)]).margin(1e-6));
  REQUIRE_THROWS_WITH(cross_entropy(x, from_vector(std::vector<int64_t>{0, 1}, {2, 1})),
                      Catch::Contains("targets of shape (2,1) do not match logits of shape (2,3,2): expected (2,2)"));
  REQUIRE_THROWS_WITH(cross_entropy(one, from_vector(std::vector<int64_t>{2})),
                      Catch::Contains("take a 0-d target, got shape (1,)"));
}

TEST_CASE("cross_entropy rejects bad targets, naming them") {
  Variable logits(zeros({2, 3}));
  REQUIRE_THROWS_WITH(cross_entropy(logits, from_vector(std::vector<int64_t>{0, 3})),
                      Catch::Contains("[cross_entropy] target 3 at index 1 is out of range for 3 classes"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, tensor({0, 1})), Catch::Contains("targets must be int64"));
  REQUIRE_THROWS_WITH(cross_entropy(logits, from_vector(std::vector<int64_t>{0})),
                      Catch::Contains("do not match logits"));
}

TEST_CASE("mse_loss, ReLU and Flatten") {
  REQUIRE(mse_loss(Variable(tensor({1, 2})), Variable(tensor({3, 2}))).item() == 2);
  check_gradients("mse", [](const Vs& v) { return mse_loss(v[0], v[1]); }, {randn({3, 2}), randn({3, 2})});
  REQUIRE(ReLU()(Variable(tensor({-1, 2}))).data().to_vector<float>() == V{0, 2});
  REQUIRE(Flatten()(Variable(zeros({2, 3, 4}))).shape() == Shape{2, 12});
  REQUIRE(Flatten()(Variable(zeros({2, 3}))).shape() == Shape{2, 3});
  // A (4,) input has no dim 1 to flatten from: refused, as PyTorch's (not made (4, 1)).
  REQUIRE_THROWS_WITH(Flatten()(Variable(zeros({4}))), Catch::Contains("needs at least 2 dims, got shape (4,)"));
}
