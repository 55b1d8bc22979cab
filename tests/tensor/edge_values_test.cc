// NaN, Inf and integer edge values, op by op, against what PyTorch 1.13 returns for the
// same inputs (the values in the comments were printed by torch on this machine).
#include <climits>
#include <cmath>
#include <limits>

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/testing/same_values.h"

using namespace engine;
using V = std::vector<float>;
using I = std::vector<int64_t>;

using engine::testing::kInf;
using engine::testing::kNaN;
using engine::testing::require_same;

TEST_CASE("relu and clamp keep NaN, as PyTorch does") {
  const Tensor x = tensor({kNaN, -1, 2, kInf, -kInf});
  require_same(relu(x), {kNaN, 0, 2, kInf, 0});                     // torch.relu
  require_same(relu(x.narrow(0, 0, 4)), {kNaN, 0, 2, kInf});        // the strided path too
  require_same(clamp(x, -0.5, 0.5), {kNaN, -0.5, 0.5, 0.5, -0.5});  // torch.clamp
  REQUIRE_THROWS_WITH(clamp(x, kNaN, 0.5), Catch::Contains("[clamp] a bound is NaN (lower nan, upper 0.5)"));
  REQUIRE_THROWS_WITH(clamp(x, 1, 0), Catch::Contains("[clamp] lower bound 1 exceeds upper bound 0"));
  require_same(maximum(x, zeros({5})), {kNaN, 0, 2, kInf, 0});  // torch.maximum
  require_same(minimum(x, zeros({5})), {kNaN, -1, 0, 0, -kInf});
}

TEST_CASE("relu's backward lets the gradient through at NaN, not at 0, as PyTorch's threshold_backward") {
  const Tensor x = tensor({kNaN, -1, 2, 0}), g = tensor({1, 1, 1, 1});
  require_same(relu_backward(g, x), {1, 0, 1, 0});                                                         // dense path
  require_same(relu_backward(g.expand({2, 4}), x.expand({2, 4})).reshape({8}), {1, 0, 1, 0, 1, 0, 1, 0});  // views
}

TEST_CASE("pow by 0.5 and -0.5 is sqrt and 1 / sqrt, as PyTorch's: NaN at -inf, signed at -0") {
  const Tensor x = tensor({-kInf, -2, -0.0f, 0, 0.25f, kInf, kNaN});
  // torch: x.pow(0.5) -> [nan, nan, -0.0, 0.0, 0.5, inf, nan]; x.pow(-0.5) -> [nan, nan, -inf, inf, 2.0, 0.0, nan]
  const Tensor half = pow(x, 0.5), minus_half = pow(x, -0.5);
  require_same(half, {kNaN, kNaN, 0, 0, 0.5f, kInf, kNaN});
  require_same(minus_half, {kNaN, kNaN, -kInf, kInf, 2, 0, kNaN});
  REQUIRE(std::signbit(half.to_vector<float>()[2]));
  // The other exponents keep C's pow, which agrees with torch: x.pow(-1.0) -> [-0.0, -0.5, -inf, inf, 4.0, 0.0, nan]
  const Tensor inverse = pow(x, -1.0);
  require_same(inverse, {0, -0.5f, -kInf, kInf, 4, 0, kNaN});
  REQUIRE(std::signbit(inverse.to_vector<float>()[0]));
  require_same(pow(x, 1.5), {kInf, kNaN, 0, 0, 0.125f, kInf, kNaN});  // torch: [inf, nan, 0.0, 0.0, 0.125, inf, nan]
}

TEST_CASE("reductions: NaN propagates through max and min, argmax points at the first NaN") {
  const Tensor x = tensor({kNaN, -1, 2, kInf, -kInf});
  require_same(max(x), {kNaN});
  require_same(min(x), {kNaN});
  REQUIRE(argmax(x).item() == 0);
  const Tensor m = tensor({1, kNaN, 2, 3}).reshape({2, 2});
  require_same(max(m, {1}), {kNaN, 3});  // torch amax(1): [nan, 3]
  REQUIRE(argmax(m, 1).to_vector<int64_t>() == I{1, 1});
  require_same(sum(x.narrow(0, 1, 4)), {kNaN});  // inf + -inf
}

TEST_CASE("comparisons with NaN: only ne is true") {
  const Tensor x = tensor({kNaN, 1}), y = tensor({kNaN, 1});
  require_same(eq(x, y), {0, 1});
  require_same(ne(x, y), {1, 0});
  require_same(gt(x, zeros({})), {0, 1});
  require_same(lt(x, zeros({})), {0, 0});
  require_same(ge(x, x), {0, 1});
}

TEST_CASE("abs clears the sign of -0.0 and neg/abs wrap INT64_MIN, as PyTorch's") {
  const std::vector<float> a = abs(tensor({-0.0f, 0.0f, -kInf, -2})).to_vector<float>();
  REQUIRE(a == std::vector<float>{0, 0, kInf, 2});
  REQUIRE_FALSE(std::signbit(a[0]));  // torch.abs(torch.tensor(-0.0)) is 0.0, not -0.0
  REQUIRE(std::signbit(neg(tensor({0.0f})).to_vector<float>()[0]));
  for (DType half : {DType::BFloat16, DType::Float16})
    REQUIRE_FALSE(std::signbit(abs(tensor({-0.0f}).to(half)).to_vector<float>()[0]));
  // torch.tensor([-2**63]).abs() and .neg() are both -2**63 (two's complement wraps).
  const Tensor lo = from_vector(I{INT64_MIN, -3, 5});
  REQUIRE(abs(lo).to_vector<int64_t>() == I{INT64_MIN, 3, 5});
  REQUIRE(neg(lo).to_vector<int64_t>() == I{INT64_MIN, 3, -5});
}

TEST_CASE("int64 arithmetic wraps modulo 2^64 as PyTorch's (no undefined overflow under UBSan)") {
  const Tensor a = from_vector(I{INT64_MAX, INT64_MIN, -7, 3}), b = from_vector(I{1, -1, INT64_MIN, INT64_MAX});
  // Printed by torch: a + b, a - b, a * b, a + 5, a * 3, a.sum(), a.reshape(2, 2).sum(0).
  REQUIRE(add(a, b).to_vector<int64_t>() == I{INT64_MIN, INT64_MAX, INT64_MAX - 6, INT64_MIN + 2});
  REQUIRE(sub(a, b).to_vector<int64_t>() == I{INT64_MAX - 1, INT64_MIN + 1, INT64_MAX - 6, INT64_MIN + 4});
  REQUIRE(mul(a, b).to_vector<int64_t>() == I{INT64_MAX, INT64_MIN, INT64_MIN, INT64_MAX - 2});
  REQUIRE((a + 5.0).to_vector<int64_t>() == I{INT64_MIN + 4, INT64_MIN + 5, -2, 8});
  REQUIRE((a * 3.0).to_vector<int64_t>() == I{INT64_MAX - 2, INT64_MIN, -21, 9});
  REQUIRE(sum(a).item() == -5);
  REQUIRE(sum(from_vector(I{INT64_MAX, 1, 1})).to_vector<int64_t>() == I{INT64_MIN + 1});  // torch: wraps
  REQUIRE(sum(a.reshape({2, 2}), {0}).to_vector<int64_t>() == I{INT64_MAX - 7, INT64_MIN + 3});
  Tensor c = a.clone();
  add_(c, b, 3);  // torch: c.add_(b, alpha=3)
  REQUIRE(c.to_vector<int64_t>() == I{INT64_MIN + 2, INT64_MAX - 2, INT64_MAX - 6, INT64_MIN});
  Tensor strided = a.clone().reshape({2, 2}).transpose(0, 1);
  add_(strided, b.reshape({2, 2}).transpose(0, 1), 3);  // the strided loop wraps too
  REQUIRE(strided.transpose(0, 1).reshape({4}).to_vector<int64_t>() == c.to_vector<int64_t>());
  mul_(c, 3);
  REQUIRE(c.to_vector<int64_t>() == I{INT64_MIN + 6, INT64_MAX - 8, INT64_MAX - 20, INT64_MIN});
}

TEST_CASE("an int64 tensor takes whole scalars in add_, mul_ and clamp; bounds past its range saturate") {
  Tensor a = from_vector(I{5, -5, INT64_MAX});
  // PyTorch refuses a float alpha for integers and would return floats for mul_(1.5) and
  // clamp(1.5, 3.7); truncating them silently would be a wrong number, so each is an error.
  REQUIRE_THROWS_WITH(add_(a, a.clone(), 1.5), Catch::Contains("[add_] alpha 1.5") && Catch::Contains("int64"));
  REQUIRE_THROWS_WITH(mul_(a, 1.5), Catch::Contains("[mul_] the factor 1.5") && Catch::Contains("int64"));
  REQUIRE_THROWS_WITH(mul_(a, 1e19), Catch::Contains("[mul_] the factor 1e+19"));
  REQUIRE_THROWS_WITH(clamp(a, 1.5, 3.7), Catch::Contains("[clamp] an int64 tensor (3,) takes whole bounds"));
  REQUIRE(a.to_vector<int64_t>() == I{5, -5, INT64_MAX});  // nothing was written
  const double inf = double(kInf);
  REQUIRE(clamp(a, -3, 1e30).to_vector<int64_t>() == I{5, -3, INT64_MAX});
  REQUIRE(clamp(a, -inf, 4).to_vector<int64_t>() == I{4, -5, 4});
  REQUIRE(clamp(a, -1e30, -1e25).to_vector<int64_t>() == I{INT64_MIN, INT64_MIN, INT64_MIN});
  REQUIRE(clamp(a, 1e25, inf).to_vector<int64_t>() == I{INT64_MAX, INT64_MAX, INT64_MAX});
}

TEST_CASE("int64 division: INT64_MIN / -1 and / 0 are errors, not a crash; empty tensors divide") {
  const Tensor lo = from_vector(I{INT64_MIN, 7}), minus1 = from_vector(I{-1, -1});
  REQUIRE_THROWS_WITH(div(lo, minus1), Catch::Contains("[div]") && Catch::Contains("overflows"));
  REQUIRE_THROWS_WITH(div(lo, from_vector(I{1, 0})), Catch::Contains("division by zero"));
  REQUIRE(div(from_vector(I{7, -7}), from_vector(I{2, 2})).to_vector<int64_t>() == I{3, -3});  // truncates, as C++
  const Tensor empty_i = from_vector(I{});
  const Tensor q = div(empty_i, empty_i);
  REQUIRE(q.numel() == 0);
  REQUIRE(q.dtype() == DType::Int64);
}

TEST_CASE("int64 tensor op double: whole numbers only, never a silent truncation") {
  const Tensor t = from_vector(I{3, -4});
  REQUIRE((t * 2.0).to_vector<int64_t>() == I{6, -8});
  REQUIRE((t + -1.0).to_vector<int64_t>() == I{2, -5});
  REQUIRE_THROWS_WITH(t * 1.5, Catch::Contains("int64 tensor op 1.5") && Catch::Contains("t.to(DType::Float32)"));
  REQUIRE_THROWS_AS(t + 1e19, Error);
  REQUIRE_THROWS_AS(1.0 / t + 0.5, Error);
  require_same(t.to(DType::Float32) * 1.5, {4.5, -6});  // the conversion the error asks for
}

TEST_CASE("int64 fills and arange: NaN, infinities and counts past int64 are errors, as in PyTorch") {
  // torch.full((2,), nan, dtype=torch.int64): "value cannot be converted to type int64_t without overflow"
  for (double bad : {double(NAN), double(INFINITY), 1e30, -1e19, 0x1p63})
    REQUIRE_THROWS_WITH(full({2}, bad, DType::Int64), Catch::Contains("cannot be converted to int64 without overflow"));
  REQUIRE(full({2}, -0x1p63, DType::Int64).to_vector<int64_t>() == I{INT64_MIN, INT64_MIN});  // the edge fits
  REQUIRE(full({1}, 2.7, DType::Int64).to_vector<int64_t>() == I{2});                         // truncates, as PyTorch
  // torch.arange(0, inf): "unsupported range: 0 -> inf"; torch.arange(0, 1e30): "invalid size, possible overflow?"
  REQUIRE_THROWS_WITH(arange(0, INFINITY), Catch::Contains("[arange] unsupported range 0 -> inf"));
  REQUIRE_THROWS_WITH(arange(0, 5, NAN), Catch::Contains("each must be finite"));
  REQUIRE_THROWS_WITH(arange(0, 1e30), Catch::Contains("more than a tensor can hold"));
  REQUIRE_THROWS_WITH(arange(-1e308, 1e308, 1), Catch::Contains("more than a tensor can hold"));
  REQUIRE(arange(5, 0).numel() == 0);  // an empty range stays empty
}

TEST_CASE("var with no degrees of freedom left divides by 0, as PyTorch's: inf, or NaN where all agree") {
  // torch.var(torch.arange(4.), dim=0, correction=4) -> inf; correction=5 -> inf (max(0, N - c));
  // torch.var(torch.ones(4), dim=0, correction=4) -> nan; correction=-1 -> 1 (5 / 5).
  const Tensor x = arange(0, 4);
  REQUIRE(std::isinf(var(x, {0}, false, 4).item()));
  REQUIRE(std::isinf(var(x, {0}, false, 5).item()));
  REQUIRE(std::isnan(var(ones({4}), {0}, false, 4).item()));
  REQUIRE(std::isnan(var(ones({1})).item()));
  REQUIRE(var(x, {0}, false, -1).item() == 1);
  // Corrections at int64's ends form no overflowing N - correction (UBSan checks, in the
  // sanitizer build): the divisor is taken in double.
  REQUIRE(std::isinf(var(x, {0}, false, std::numeric_limits<int64_t>::max()).item()));
  REQUIRE(var(x, {0}, false, std::numeric_limits<int64_t>::min()).item() >= 0);
}

TEST_CASE("all_finite: false for any inf or NaN, on every path (= torch.isfinite(x).all())") {
  // Long enough for the vectorised loop's whole blocks and its tail; the bad value at each
  // position in turn, so no block or tail is skipped.
  for (const float bad : {kInf, -kInf, kNaN}) {
    Tensor x = arange(0, 37);
    REQUIRE(all_finite(x));
    for (int64_t i = 0; i < 37; ++i) {
      Tensor y = x.clone();
      y.data<float>()[i] = bad;
      INFO("value " << bad << " at " << i);
      REQUIRE_FALSE(all_finite(y));
      REQUIRE_FALSE(all_finite(y.to(DType::BFloat16)));                               // a 16-bit tensor, widened
      REQUIRE_FALSE(all_finite(y.reshape({37, 1}).expand({37, 2}).transpose(0, 1)));  // strided
    }
  }
  REQUIRE(all_finite(tensor({std::numeric_limits<float>::max(), -std::numeric_limits<float>::max(),
                             std::numeric_limits<float>::denorm_min()})));
  REQUIRE(all_finite(zeros({0})));
  REQUIRE(all_finite(arange(0, 5).to(DType::Int64)));
}
