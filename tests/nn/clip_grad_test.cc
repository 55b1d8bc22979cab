// Gradient clipping against closed forms and PyTorch's torch.nn.utils values.
#include <cmath>

#include "catch2/catch.hpp"
#include "nn/clip_grad.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;
using autograd::Variable;

namespace {
// Two parameters whose gradients are given: a (2,) and a (1,).
std::vector<Variable> with_grads(std::vector<float> a, std::vector<float> b) {
  Variable pa(zeros({2}), true), pb(zeros({1}), true);
  pa.mutable_grad() = from_vector(a), pb.mutable_grad() = from_vector(b);
  return {pa, pb};
}
std::vector<float> grads(const std::vector<Variable>& ps) {
  std::vector<float> out;
  for (const Variable& p : ps)
    for (float v : p.grad().to_vector<float>()) out.push_back(v);
  return out;
}
}  // namespace

TEST_CASE("clip_grad_norm_ scales every gradient by max_norm / (norm + 1e-6) when the norm is larger") {
  // |(3, 4, 12)| = 13. PyTorch 1.13 prints 13.0 and (1.4999999, 1.9999999, 5.9999995).
  auto ps = with_grads({3, 4}, {12});
  REQUIRE(clip_grad_norm_(ps, 6.5) == 13.0);
  const double coef = 6.5 / (13.0 + 1e-6);
  const std::vector<float> got = grads(ps);
  REQUIRE(got == std::vector<float>{float(3 * coef), float(4 * coef), float(12 * coef)});
  // Below max_norm nothing changes, to the bit.
  ps = with_grads({3, 4}, {12});
  REQUIRE(clip_grad_norm_(ps, 13.5) == 13.0);
  REQUIRE(grads(ps) == std::vector<float>{3, 4, 12});
}

TEST_CASE("clip_grad_norm_ of other orders: 1, 3 and inf, as PyTorch's") {
  auto ps = with_grads({3, -4}, {12});
  REQUIRE(clip_grad_norm_(ps, 100, 1) == 19.0);
  REQUIRE(clip_grad_norm_(ps, 100, kInfNorm) == 12.0);
  // (27 + 64 + 1728)^(1/3) = 12.2070570 (PyTorch: 12.207057).
  REQUIRE(clip_grad_norm_(ps, 100, 3) == Approx(std::cbrt(1819.0)).epsilon(1e-12));
  clip_grad_norm_(ps, 6, kInfNorm);  // max |g| = 12 -> each halved (to 6 / (12 + 1e-6))
  REQUIRE(grads(ps)[2] == float(12 * (6 / (12 + 1e-6))));
}

TEST_CASE("a NaN gradient makes the norm NaN and every gradient NaN (PyTorch's default), or is refused") {
  auto ps = with_grads({3, NAN}, {12});
  REQUIRE(std::isnan(clip_grad_norm_(ps, 1)));
  for (float g : grads(ps)) REQUIRE(std::isnan(g));
  ps = with_grads({3, NAN}, {12});
  REQUIRE(std::isnan(clip_grad_norm_(ps, 1, kInfNorm)));  // max's NaN too
  ps = with_grads({3, INFINITY}, {12});
  REQUIRE_THROWS_WITH(clip_grad_norm_(ps, 1, 2, /*error_if_nonfinite=*/true),
                      Catch::Contains("[clip_grad_norm_] the total norm of order 2 of the gradients is inf"));
  REQUIRE(grads(ps)[1] == INFINITY);  // refused: left as they were
}

TEST_CASE("clip_grad_norm_ skips parameters without a gradient; bad arguments are named") {
  Variable none(zeros({3}), true);
  REQUIRE(clip_grad_norm_({none}, 1) == 0);
  REQUIRE_FALSE(none.grad().defined());
  auto ps = with_grads({3, 4}, {12});
  REQUIRE_THROWS_WITH(clip_grad_norm_(ps, -1), Catch::Contains("max_norm must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(clip_grad_norm_(ps, 1, 0), Catch::Contains("norm_type must be > 0 (or inf), got 0"));
  REQUIRE_THROWS_WITH(clip_grad_norm_(ps, 1, NAN), Catch::Contains("norm_type must be > 0"));
  REQUIRE(grads(ps) == std::vector<float>{3, 4, 12});
}

TEST_CASE("clip_grad_value_ clamps each gradient element into [-v, v]") {
  auto ps = with_grads({-5, 0.5}, {7});
  clip_grad_value_(ps, 1);
  REQUIRE(grads(ps) == std::vector<float>{-1, 0.5, 1});  // PyTorch: (-1, 0.5), (1)
  REQUIRE_THROWS_WITH(clip_grad_value_(ps, -1), Catch::Contains("clip_value must be >= 0, got -1"));
}
