// Gradient clipping against closed forms and PyTorch's torch.nn.utils values.
#include <cmath>

#include "catch2/catch.hpp"
#include "nn/clip_grad.h"
#include "nn/grad_scaler.h"
#include "nn/sgd.h"
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

TEST_CASE("with a GradScaler, unscale_ first: clipping sees the true norm, and an Inf still skips the step") {
  // PyTorch's recipe: scaler.scale(loss).backward(); scaler.unscale_(opt);
  // clip_grad_norm_(params, max); scaler.step(opt); scaler.update().
  Variable p(tensor({1, 1}), true);
  SGD opt({p}, {.lr = 1});
  GradScaler scaler({.init_scale = 1024});
  autograd::sum(scaler.scale(p * Variable(tensor({3, 4})))).backward();  // grad (3, 4) x 1024
  scaler.unscale_(opt);
  REQUIRE(clip_grad_norm_({p}, 1) == 5.0);  // the norm of (3, 4), not of the scaled gradient
  REQUIRE(scaler.step(opt));
  const double coef = 1 / (5 + 1e-6);  // each clipped gradient is rounded to float32, then stepped
  REQUIRE(p.data().to_vector<float>() == std::vector<float>{1.0f - float(3 * coef), 1.0f - float(4 * coef)});
  scaler.update();
  // An overflow: the norm is inf, clipping multiplies by 0, and the step is skipped all the same.
  opt.zero_grad();
  const std::vector<float> before = p.data().to_vector<float>();
  autograd::sum(scaler.scale(p * Variable(tensor({INFINITY, 1})))).backward();
  scaler.unscale_(opt);
  REQUIRE(clip_grad_norm_({p}, 1) == INFINITY);  // (as PyTorch: the gradients become inf * 0 = NaN, and 0)
  REQUIRE_FALSE(scaler.step(opt));
  REQUIRE(p.data().to_vector<float>() == before);
}

TEST_CASE("a GradScaler refuses a second unscale_ or step() before update(), as PyTorch's") {
  Variable p(tensor({1, 1}), true);
  SGD opt({p}, {.lr = 1});
  GradScaler scaler({.init_scale = 1024});
  autograd::sum(scaler.scale(p * Variable(tensor({3, 4})))).backward();
  scaler.unscale_(opt);
  REQUIRE_THROWS_WITH(scaler.unscale_(opt), Catch::Contains("unscale_() was already called for this optimizer"));
  REQUIRE(scaler.step(opt));
  // A forgotten update(): the next step would have used gradients still times 1024.
  opt.zero_grad();
  autograd::sum(scaler.scale(p * Variable(tensor({3, 4})))).backward();
  REQUIRE_THROWS_WITH(scaler.step(opt), Catch::Contains("step() was already called for this optimizer since the "
                                                        "last update(): call update() after each step"));
  scaler.update();
  REQUIRE(scaler.step(opt));  // after update(), a new step unscales again
  REQUIRE(p.grad().to_vector<float>() == std::vector<float>{3, 4});
}

TEST_CASE("a GradScaler refuses a step with no gradient and an update() with no step") {
  Variable p(tensor({1, 1}), true);
  SGD opt({p}, {.lr = 1});
  GradScaler scaler({.init_scale = 1024, .growth_interval = 1});
  // backward() forgotten: the step would do nothing and update() would grow the scale.
  REQUIRE_THROWS_WITH(scaler.step(opt), Catch::Contains("none of this optimizer's 1 parameters has a gradient"));
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Contains("update() was called without a step()"));
  REQUIRE(scaler.get_scale() == 1024);
  autograd::sum(scaler.scale(p * Variable(tensor({3, 4})))).backward();
  REQUIRE(scaler.step(opt));  // the refusals left nothing behind
  scaler.update();
  REQUIRE(scaler.get_scale() == 2048);
  REQUIRE_THROWS_WITH(scaler.update(), Catch::Contains("without a step()"));  // update() twice
}
