// BatchNorm's AVX-512 row loops (tensor/batch_norm_cpu.h) against the plain loops they
// replace, bit for bit: lengths around the vector width (tails), NaN, -0 and large values.
#include "tensor/batch_norm_cpu.h"

#include <catch2/catch.hpp>
#include <cmath>
#include <cstring>
#include <vector>

#include "tensor/random.h"

using namespace engine;

namespace {

// Bit-for-bit equality (NaN equals NaN, -0 differs from +0).
bool same_bits(double a, double b) { return std::memcmp(&a, &b, sizeof a) == 0; }
bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

// The order the loops promise: 16 float lanes, then the tail and the lanes added in double.
template <class F>
double lanes_then_tail(int64_t S, F f) {
  float lane[16] = {};
  int64_t i = 0;
  for (; i + 16 <= S; i += 16)
    for (int k = 0; k < 16; ++k) lane[k] += f(i + k);
  double total = 0;
  for (; i < S; ++i) total += f(i);
  for (float v : lane) total += v;
  return total;
}

std::vector<float> values(int64_t S, Generator& g) {
  std::vector<float> v(static_cast<size_t>(S));
  for (float& x : v) x = g.normal() * 3.0f;
  if (S > 3) v[3] = -0.0f;
  if (S > 17) v[17] = 1e30f;
  if (S > 20) v[20] = std::nanf("");
  return v;
}

}  // namespace

TEST_CASE("BatchNorm's AVX-512 row loops equal the plain loops bit for bit") {
  if (!detail::batch_norm_avx512()) {
    WARN("SKIPPED: this CPU has no AVX-512F, so the plain loops run and there is nothing to compare");
    return;
  }
  Generator g(7);
  for (int64_t S : {0, 1, 15, 16, 17, 31, 33, 196, 784}) {
    INFO("S = " << S);
    const std::vector<float> x = values(S, g), d = values(S, g);
    const float mean = 0.25f, scale = 1.5f, shift = -0.5f, k = 0.75f, mean_dy = 0.125f, slope = -2.0f;
    const float* px = x.data();
    const float* pd = d.data();
    CHECK(same_bits(detail::sum_avx512(S, px), lanes_then_tail(S, [&](int64_t i) { return px[i]; })));
    CHECK(same_bits(detail::squared_deviations_avx512(S, px, mean),
                    lanes_then_tail(S, [&](int64_t i) { return (px[i] - mean) * (px[i] - mean); })));
    const detail::RowSums r = detail::row_sums_avx512(S, pd, px, mean);
    CHECK(same_bits(r.dy, lanes_then_tail(S, [&](int64_t i) { return pd[i]; })));
    CHECK(same_bits(r.dy_xc, lanes_then_tail(S, [&](int64_t i) { return pd[i] * (px[i] - mean); })));
    for (bool relu : {false, true}) {
      std::vector<float> out(static_cast<size_t>(S) + 1, 9.0f);  // one past the row: untouched
      detail::normalise_row_avx512(S, px, scale, shift, relu, out.data());
      for (int64_t i = 0; i < S; ++i) {
        const float y = px[i] * scale + shift;
        REQUIRE(same_bits(out[size_t(i)], relu && y <= 0 ? 0.0f : y));
      }
      REQUIRE(out[size_t(S)] == 9.0f);
    }
    std::vector<float> dx(static_cast<size_t>(S) + 1, 9.0f);
    detail::batch_norm_dx_avx512(S, pd, px, mean, k, mean_dy, slope, dx.data());
    for (int64_t i = 0; i < S; ++i) REQUIRE(same_bits(dx[size_t(i)], k * (pd[i] - mean_dy - (px[i] - mean) * slope)));
    REQUIRE(dx[size_t(S)] == 9.0f);
  }
}

TEST_CASE(
    "The fused pool's plane, forward and backward: each window's maximum of relu(y) by max_pool2d's rule, and its "
    "gradient there where ReLU passed, 0 elsewhere") {
  if (!detail::batch_norm_avx512()) {
    WARN("SKIPPED: this CPU has no AVX-512F and VL");
    return;
  }
  Generator g(8);
  for (auto [H, W] : {std::pair<int64_t, int64_t>{2, 2}, {5, 7}, {6, 36}, {7, 33}}) {
    INFO("plane " << H << " x " << W);
    const int64_t OW = W / 2;
    std::vector<float> x = values(H * W, g);
    for (int64_t i = 0; i < H * W; i += 5) x[size_t(i)] = x[size_t(i + 1 < H * W ? i + 1 : i)];  // ties
    if (W >= 6) {  // two NaNs in one window (the first wins), +inf beside a number and below a NaN
      x[0] = std::nanf(""), x[1] = -std::nanf("");
      x[2] = INFINITY, x[size_t(W + 3)] = -std::nanf("");
      x[4] = INFINITY, x[5] = INFINITY;
    }
    const std::vector<float> grad = values((H / 2) * OW, g);
    const float scale = 0.5f, shift = 0.1f;
    // The forward's relu(y), max_pool2d's rule over it (first maximum, first NaN), and the
    // separate backwards: zeros, 0 + g at the maximum, kept where relu's input passed.
    std::vector<float> expect(static_cast<size_t>(H * W), 0.0f), out(expect.size(), 9.0f);
    std::vector<float> pooled_expect(static_cast<size_t>((H / 2) * OW)), pooled(pooled_expect.size(), 9.0f);
    auto relu_y = [&](int64_t at) {
      const float y = x[size_t(at)] * scale + shift;
      return y <= 0 ? 0.0f : y;
    };
    for (int64_t oy = 0; oy < H / 2; ++oy)
      for (int64_t ox = 0; ox < OW; ++ox) {
        const int64_t at[4] = {2 * oy * W + 2 * ox, 2 * oy * W + 2 * ox + 1, (2 * oy + 1) * W + 2 * ox,
                               (2 * oy + 1) * W + 2 * ox + 1};
        int64_t best = at[0];
        for (int k = 1; k < 4; ++k)
          if (relu_y(at[k]) > relu_y(best) || (std::isnan(relu_y(at[k])) && !std::isnan(relu_y(best)))) best = at[k];
        const float y = x[size_t(best)] * scale + shift;
        expect[size_t(best)] = y <= 0 ? 0.0f : 0.0f + grad[size_t(oy * OW + ox)];
        pooled_expect[size_t(oy * OW + ox)] = relu_y(best);
      }
    detail::relu_pool2_plane_avx512(H, W, x.data(), scale, shift, pooled.data());
    for (size_t i = 0; i < pooled.size(); ++i) {
      INFO("pooled output " << i);
      REQUIRE(same_bits(pooled[i], pooled_expect[i]));
    }
    detail::relu_pool2_grad_plane_avx512(H, W, grad.data(), x.data(), scale, shift, out.data());
    for (size_t i = 0; i < out.size(); ++i) {
      INFO("position " << i);
      REQUIRE(same_bits(out[i], expect[i]));
    }
  }
}
