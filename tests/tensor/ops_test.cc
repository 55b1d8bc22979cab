// Elementwise ops and reductions against hand-computed values, on broadcast, zero-size and
// non-contiguous inputs, with errors that name the op and the shapes.
#include <cmath>
#include <cstring>
#include <functional>

#include "catch2/catch.hpp"
#include "tensor/ops.h"

using namespace engine;
using V = std::vector<float>;
using I = std::vector<int64_t>;

namespace {
void require_close(const Tensor& t, const V& expect, double tol = 1e-6) {
  const V got = t.to_vector<float>();
  REQUIRE(got.size() == expect.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("element " << i << ": got " << got[i] << " expected " << expect[i]);
    if (std::isnan(expect[i]))
      REQUIRE(std::isnan(got[i]));
    else
      REQUIRE(std::abs(got[i] - expect[i]) <= tol * (1 + std::abs(expect[i])));
  }
}
}  // namespace

TEST_CASE("binary ops compute their formula") {
  Tensor a = tensor({1, -2, 3, 4}), b = tensor({2, 4, -1, 0.5});
  require_close(a + b, {3, 2, 2, 4.5});
  require_close(a - b, {-1, -6, 4, 3.5});
  require_close(a * b, {2, -8, -3, 2});
  require_close(a / b, {0.5, -0.5, -3, 8});
  require_close(pow(tensor({2, 3}), tensor({3, 0.5})), {8, std::sqrt(3.0f)});
  require_close(maximum(a, b), {2, 4, 3, 4});
  require_close(minimum(a, b), {1, -2, -1, 0.5});
  require_close(eq(a, tensor({1, 0, 3, 0})), {1, 0, 1, 0});
  require_close(ne(a, tensor({1, 0, 3, 0})), {0, 1, 0, 1});
  require_close(lt(a, b), {1, 1, 0, 0});
  require_close(le(a, tensor({1, -3, 3, 5})), {1, 0, 1, 1});
  require_close(gt(a, b), {0, 0, 1, 1});
  require_close(ge(a, tensor({1, -3, 4, 5})), {1, 1, 0, 0});
  require_close(where(tensor({1, 0, 0, 2}), a, b), {1, 4, -1, 4});
  require_close(a + 1.0, {2, -1, 4, 5});
  require_close(10.0 - a, {9, 12, 7, 6});
  require_close(a * 2.0, {2, -4, 6, 8});
  require_close(1.0 / b, {0.5, 0.25, -1, 2});
}

TEST_CASE("unary ops compute their formula") {
  Tensor x = tensor({-2, -0.5, 0, 0.5, 3});
  require_close(-x, {2, 0.5, 0, -0.5, -3});
  require_close(abs(x), {2, 0.5, 0, 0.5, 3});
  require_close(relu(x), {0, 0, 0, 0.5, 3});
  require_close(clamp(x, -1, 1), {-1, -0.5, 0, 0.5, 1});
  require_close(exp(x), {std::exp(-2.0f), std::exp(-0.5f), 1, std::exp(0.5f), std::exp(3.0f)});
  require_close(tanh(x), {std::tanh(-2.0f), std::tanh(-0.5f), 0, std::tanh(0.5f), std::tanh(3.0f)});
  require_close(sigmoid(x), {1 / (1 + std::exp(2.0f)), 1 / (1 + std::exp(0.5f)), 0.5, 1 / (1 + std::exp(-0.5f)),
                             1 / (1 + std::exp(-3.0f))});
  require_close(sigmoid(tensor({-200, 200})), {0, 1});  // no overflow to NaN
  require_close(log(tensor({1, std::exp(2.0f)})), {0, 2});
  require_close(sqrt(tensor({4, 2.25})), {2, 1.5});
  require_close(pow(tensor({2, -3}), 2.0), {4, 9});
  require_close(pow(tensor({4, 9}), 0.5), {2, 3});
}

TEST_CASE("relu_backward passes the gradient where the input is positive, densely and on views") {
  Tensor x = tensor({-2, -0.5, 0, 0.5, 3}), g = tensor({10, 20, 30, 40, 50});
  require_close(relu_backward(g, x), {0, 0, 0, 40, 50});  // the one-pass path
  // A transposed view takes the two-op path; both must agree element for element.
  Tensor xm = tensor({-1, 2, 3, -4, 5, -6}).reshape({2, 3}), gm = tensor({1, 2, 3, 4, 5, 6}).reshape({2, 3});
  require_close(relu_backward(gm.transpose(0, 1), xm.transpose(0, 1)), {0, 0, 2, 5, 3, 0});
  require_close(relu_backward(gm.transpose(0, 1).contiguous(), xm.transpose(0, 1).contiguous()), {0, 0, 2, 5, 3, 0});
}

TEST_CASE("relu and relu_backward's flat loops equal the rule element by element, on every tail length") {
  // Lengths around 16 floats (one AVX-512 vector, where the CPU has it); NaN passes, -0, +0
  // and negatives do not; the gradient's own NaN and infinity pass only where x does.
  const std::vector<float> specials = {NAN, -0.0f, 0.0f, -1.0f, INFINITY, -INFINITY, 1e-30f, -1e-30f};
  manual_seed(9);
  for (const int64_t n : {1, 8, 15, 16, 17, 33, 100}) {
    std::vector<float> x = randn({n}).to_vector<float>(), g = randn({n}).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      if (i % 3 == 0) x[size_t(i)] = specials[size_t(i / 3) % specials.size()];
      if (i % 5 == 1) g[size_t(i)] = i % 2 ? INFINITY : NAN;
    }
    const std::vector<float> r = relu(from_vector(x)).to_vector<float>(),
                             d = relu_backward(from_vector(g), from_vector(x)).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      INFO("n " << n << " i " << i << " x " << x[size_t(i)] << " g " << g[size_t(i)]);
      const bool passes = !(x[size_t(i)] <= 0);
      const float want_r = passes ? x[size_t(i)] : 0.0f, want_d = passes ? g[size_t(i)] : 0.0f;
      REQUIRE(std::memcmp(&r[size_t(i)], &want_r, 4) == 0);
      REQUIRE(std::memcmp(&d[size_t(i)], &want_d, 4) == 0);
    }
  }
}

TEST_CASE("int64 tensors support arithmetic, comparison and reductions") {
  Tensor a = from_vector(I{1, 5, -3}), b = from_vector(I{2, 2, 2});
  REQUIRE((a + b).to_vector<int64_t>() == I{3, 7, -1});
  REQUIRE((a * b).dtype() == DType::Int64);
  REQUIRE((a / b).to_vector<int64_t>() == I{0, 2, -1});  // C++ truncation
  REQUIRE(eq(a, from_vector(I{1, 0, -3})).to_vector<float>() == V{1, 0, 1});
  REQUIRE(sum(a).to_vector<int64_t>() == I{3});
  REQUIRE(max(a).item() == 5);
  REQUIRE(abs(a).to_vector<int64_t>() == I{1, 5, 3});
  REQUIRE_THROWS_WITH(exp(a), Catch::Contains("[exp] needs a floating-point tensor, got int64"));
  REQUIRE_THROWS_WITH(a / from_vector(I{1, 0, 1}), Catch::Contains("[div] int64 division by zero"));
  REQUIRE_THROWS_WITH(a + tensor({1, 2, 3}), Catch::Contains("[add] dtypes differ: int64 (3,) vs float32 (3,)"));
}

TEST_CASE("broadcasting follows NumPy's rule") {
  Tensor col = tensor({1, 2}).reshape({2, 1}), row = tensor({10, 20, 30});
  Tensor s = col + row;
  REQUIRE(s.shape() == Shape{2, 3});
  require_close(s, {11, 21, 31, 12, 22, 32});
  require_close(zeros({2, 1, 3}) + tensor({1, 2}).reshape({2, 1}), {1, 1, 1, 2, 2, 2, 1, 1, 1, 2, 2, 2});
  REQUIRE((zeros({4, 1, 5}) * zeros({3, 1})).shape() == Shape{4, 3, 5});
  // A row repeated over the leading dims (the bias-add path), with and without leading 1s.
  Tensor m = arange(0, 6).reshape({2, 3});
  require_close(m + row, {10, 21, 32, 13, 24, 35});
  require_close(m - row.reshape({1, 3}), {-10, -19, -28, -7, -16, -25});
  require_close(arange(0, 12).reshape({2, 2, 3}) * m, {0, 1, 4, 9, 16, 25, 0, 7, 16, 27, 40, 55});
  require_close(where(tensor({1, 0}).reshape({2, 1}), row, scalar_tensor(-1)), {10, 20, 30, -1, -1, -1});
  REQUIRE_THROWS_WITH(zeros({2, 3}) + zeros({4}),
                      Catch::Contains("[add] shapes (2,3) and (4,) do not broadcast: dim 1 is 3 vs 4"));
}

TEST_CASE("every elementwise op accepts non-contiguous and zero-size inputs") {
  // x is a transposed view; xc is the same values, contiguous. Results must agree.
  Tensor base = arange(1, 13).reshape({3, 4}) / 13.0;
  Tensor x = base.transpose(0, 1), xc = x.contiguous(), y = x.slice(0, 0, 4, 1) + 0.25;
  REQUIRE_FALSE(x.is_contiguous());
  using U = std::function<Tensor(const Tensor&)>;
  using B = std::function<Tensor(const Tensor&, const Tensor&)>;
  const std::vector<U> unary = {[](auto& t) { return neg(t); },      [](auto& t) { return abs(t); },
                                [](auto& t) { return exp(t); },      [](auto& t) { return log(t); },
                                [](auto& t) { return sqrt(t); },     [](auto& t) { return tanh(t); },
                                [](auto& t) { return sigmoid(t); },  [](auto& t) { return relu(t); },
                                [](auto& t) { return pow(t, 3.0); }, [](auto& t) { return clamp(t, 0.2, 0.5); }};
  const std::vector<B> binary = {
      [](auto& a, auto& b) { return add(a, b); },     [](auto& a, auto& b) { return sub(a, b); },
      [](auto& a, auto& b) { return mul(a, b); },     [](auto& a, auto& b) { return div(a, b); },
      [](auto& a, auto& b) { return pow(a, b); },     [](auto& a, auto& b) { return maximum(a, b); },
      [](auto& a, auto& b) { return minimum(a, b); }, [](auto& a, auto& b) { return lt(a, b); },
      [](auto& a, auto& b) { return where(a, a, b); }};
  for (size_t i = 0; i < unary.size(); ++i) {
    INFO("unary op " << i);
    require_close(unary[i](x), unary[i](xc).to_vector<float>());
    REQUIRE(unary[i](zeros({0, 3})).shape() == Shape{0, 3});
  }
  for (size_t i = 0; i < binary.size(); ++i) {
    INFO("binary op " << i);
    require_close(binary[i](x, y), binary[i](xc, y.contiguous()).to_vector<float>());
    // Broadcast a non-contiguous column against a row.
    Tensor colv = x.select(1, 0).unsqueeze(1);
    require_close(binary[i](colv, y.select(0, 1)),
                  binary[i](colv.contiguous(), y.select(0, 1).contiguous()).to_vector<float>());
    REQUIRE(binary[i](zeros({0, 3}), ones({3})).shape() == Shape{0, 3});
  }
}

TEST_CASE("in-place add_ writes through views") {
  Tensor a = zeros({2, 3});
  Tensor col = a.select(1, 1);
  add_(col, tensor({1, 2}), 2.0);
  require_close(a, {0, 2, 0, 0, 4, 0});
  add_(a, tensor({1, 1, 1}));
  require_close(a, {1, 3, 1, 1, 5, 1});
  REQUIRE_THROWS_WITH(add_(col, zeros({3})), Catch::Contains("[add_]"));
}

TEST_CASE("add_ of a bias along the rows equals the float adds, on every tail length") {
  manual_seed(8);
  for (const int64_t n : {1, 15, 16, 17, 40}) {
    for (const Shape& bias_shape : {Shape{n}, Shape{1, n}}) {
      Tensor a = randn({3, n});
      const Tensor b = randn(bias_shape);
      const std::vector<float> before = a.to_vector<float>(), bv = b.to_vector<float>();
      add_(a, b);
      const std::vector<float> got = a.to_vector<float>();
      for (int64_t i = 0; i < 3 * n; ++i) {
        INFO("n " << n << " bias dims " << bias_shape.size() << " element " << i);
        REQUIRE(got[size_t(i)] == before[size_t(i)] + bv[size_t(i % n)]);
      }
      add_(a, b, 0.5);  // another alpha: each product rounded, then added
      const std::vector<float> halves = a.to_vector<float>();
      for (int64_t i = 0; i < 3 * n; ++i) REQUIRE(halves[size_t(i)] == got[size_t(i)] + 0.5f * bv[size_t(i % n)]);
      add_(a, a);  // a tensor added into itself
      const std::vector<float> doubled = a.to_vector<float>();
      for (int64_t i = 0; i < 3 * n; ++i) REQUIRE(doubled[size_t(i)] == 2 * halves[size_t(i)]);
    }
  }
}

TEST_CASE("reductions over all elements and given dims, with keepdim") {
  Tensor a = from_vector(V{1, 5, 3, 4, 2, 6}, {2, 3});
  REQUIRE(sum(a).item() == 21);
  REQUIRE(sum(a).dim() == 0);
  require_close(sum(a, {0}), {5, 7, 9});
  require_close(sum(arange(0, 12).reshape({2, 2, 3}), {0, 1}), {18, 22, 26});  // leading dims
  REQUIRE(sum(arange(0, 12).reshape({2, 2, 3}), {1, 0}, true).shape() == Shape{1, 1, 3});
  require_close(sum(arange(0, 12).reshape({2, 2, 3}), {0, 2}), {24, 42});  // not a prefix
  require_close(sum(a, {1}), {9, 12});
  REQUIRE(sum(a, {1}, true).shape() == Shape{2, 1});
  REQUIRE(sum(a, {0, 1}, true).shape() == Shape{1, 1});
  require_close(mean(a, {-1}), {3, 4});
  require_close(max(a, {0}), {4, 5, 6});
  require_close(min(a, {1}), {1, 2});
  require_close(var(a, {1}), {4, 4});  // (1,5,3): mean 3, ss 8, /2
  require_close(var(a, {1}, false, 0), {8.0f / 3, 8.0f / 3});
  REQUIRE(argmax(a, 1).to_vector<int64_t>() == I{1, 2});
  REQUIRE(argmax(a, 0, true).shape() == Shape{1, 3});
  REQUIRE(argmax(a).item() == 5);
  REQUIRE(argmax(tensor({3, 7, 7, 1})).item() == 1);  // first of ties
  // Non-contiguous input: reduce a transposed view.
  require_close(sum(a.transpose(0, 1), {0}), {9, 12});
  require_close(sum(a.transpose(0, 1), {1}), {5, 7, 9});
  require_close(max(a.transpose(0, 1), {0}), {5, 6});
  // Zero-size: sums are 0, means NaN, max is an error.
  require_close(sum(zeros({0, 3}), {0}), {0, 0, 0});
  REQUIRE(std::isnan(mean(zeros({0})).item()));
  REQUIRE_THROWS_WITH(max(zeros({0})), Catch::Contains("[max] cannot reduce over zero elements"));
  REQUIRE(max(tensor({1, NAN, 3})).item() != max(tensor({1, NAN, 3})).item());  // NaN propagates
  REQUIRE_THROWS_WITH(sum(a, {2}), Catch::Contains("[sum] dim 2 is out of range"));
  REQUIRE_THROWS_WITH(sum(a, {1, -1}), Catch::Contains("[sum] dim 1 is listed twice"));
}

TEST_CASE("sum over the leading dim adds each column in double, row by row, to the bit, on every length") {
  // A bias's gradient: (rows, n) summed over dim 0. Each column's sum is exact-order: the
  // rows in turn, in double, then rounded once (8 columns at a time with AVX-512, and the
  // tail one by one, must give the same bits).
  manual_seed(3);
  for (const int64_t n : {1, 7, 8, 9, 23, 256}) {
    const Tensor x = randn({5, n}) * 1e3;
    const std::vector<float> v = x.to_vector<float>(), got = sum(x, {0}).to_vector<float>();
    REQUIRE(got.size() == size_t(n));
    for (int64_t j = 0; j < n; ++j) {
      double s = 0;
      for (int64_t i = 0; i < 5; ++i) s += double(v[size_t(i * n + j)]);
      INFO("n " << n << " column " << j);
      REQUIRE(got[size_t(j)] == float(s));
    }
  }
}

TEST_CASE("sum_to undoes a broadcast") {
  Tensor g = ones({4, 2, 3});
  require_close(sum_to(g, {2, 1}), {12, 12});
  require_close(sum_to(g, {3}), {8, 8, 8});
  REQUIRE(sum_to(g, {1, 1, 3}).shape() == Shape{1, 1, 3});
  REQUIRE_THROWS_WITH(sum_to(g, {5}), Catch::Contains("[sum_to]"));
}
