// The GPU convolution's tile steps (tensor/cuda/conv_tiles.h), run on the CPU: every thread
// of every block in turn, each step for all threads before the next (what the kernel's
// barriers guarantee), against the definition of a convolution. The same functions are
// the CUDA kernel, so a wrong index here is a wrong index there; the kernel itself is
// checked against the CPU convolution on a GPU (tests/nn:cuda_nn_test).
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/cuda/conv_tiles.h"

namespace {

using namespace engine::cuda::conv_tiles;

// out[n][o][oy][ox] = bias[o] + sum over c, i, j of w[o][c][i][j] * x[n][c][oy*s+i-p][ox*s+j-p].
std::vector<double> reference(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                              const float* bias) {
  std::vector<double> out(size_t(g.N * g.O * g.OH * g.OW));
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t oy = 0; oy < g.OH; ++oy)
        for (int64_t ox = 0; ox < g.OW; ++ox) {
          double sum = bias ? bias[o] : 0;
          for (int64_t c = 0; c < g.C; ++c)
            for (int64_t i = 0; i < g.kh; ++i)
              for (int64_t j = 0; j < g.kw; ++j) {
                const int64_t y = oy * g.stride + i - g.padding, xx = ox * g.stride + j - g.padding;
                if (y < 0 || y >= g.H || xx < 0 || xx >= g.W) continue;
                sum += double(w[size_t(((o * g.C + c) * g.kh + i) * g.kw + j)]) *
                       x[size_t(((n * g.C + c) * g.H + y) * g.W + xx)];
              }
          out[size_t(((n * g.O + o) * g.OH + oy) * g.OW + ox)] = sum;
        }
  return out;
}

// The kernel's launch, one thread at a time: for each block, the walk over k in slices,
// each step run by every thread before the next begins.
std::vector<float> run_blocks(const ConvGeometry& g, const std::vector<float>& x, const std::vector<float>& w,
                              const float* bias) {
  std::vector<float> out(size_t(g.N * g.O * g.OH * g.OW), NAN);  // NaN: an output never written shows
  auto s = std::make_unique<Tiles>();
  std::vector<Pixel> px(kThreads);
  std::vector<float> acc(size_t(kThreads) * kTM * kTN);
  auto acc_of = [&](int t) -> float(&)[kTM][kTN] {
    return *reinterpret_cast<float(*)[kTM][kTN]>(&acc[size_t(t) * kTM * kTN]);
  };
  for (int64_t by = 0; by < blocks_along_channels(g); ++by)
    for (int64_t bx = 0; bx < blocks_along_pixels(g); ++bx) {
      const int64_t p0 = bx * kBN, m0 = by * kBM;
      std::fill(acc.begin(), acc.end(), 0.f);
      for (int t = 0; t < kThreads; ++t) px[size_t(t)] = pixel_of(g, p0 + t % kBN);
      for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
        for (int t = 0; t < kBK; ++t) describe_slice(g, k0, t, *s);
        for (int t = 0; t < kThreads; ++t) load_tiles(g, x.data(), w.data(), m0, k0, px[size_t(t)], t, *s);
        for (int t = 0; t < kThreads; ++t) multiply_tiles(*s, t, acc_of(t));
      }
      for (int t = 0; t < kThreads; ++t) store_tile(g, acc_of(t), bias, m0, p0, t, out.data());
    }
  return out;
}

}  // namespace

TEST_CASE("the GPU convolution's tile steps compute the convolution, for every geometry's edges") {
  struct Case {
    int64_t N, C, H, W, O, kh, kw, stride, padding;
    bool bias;
  };
  // The CNN's two layers (a small batch); more channels than one block's 64; a k walk
  // that ends inside a slice (K = 20, 45) or exactly at one (K = 32); strides with
  // images whose size they do not divide; 1x1, 5x5 and oblong windows; a lone output pixel;
  // pixel counts below, at and above a block's 128.
  const std::vector<Case> cases = {
      {3, 1, 28, 28, 32, 3, 3, 1, 1, true}, {2, 32, 14, 14, 64, 3, 3, 1, 1, true}, {2, 5, 7, 5, 70, 3, 3, 2, 1, true},
      {1, 20, 6, 6, 8, 1, 1, 1, 0, false},  {5, 2, 11, 9, 3, 5, 5, 1, 2, true},    {1, 32, 4, 4, 5, 1, 1, 1, 0, true},
      {4, 3, 13, 11, 8, 2, 2, 2, 0, false}, {1, 2, 3, 3, 130, 3, 3, 1, 0, true},   {2, 1, 8, 8, 1, 3, 3, 3, 1, true},
      {2, 3, 9, 12, 6, 2, 5, 1, 1, true},   {1, 4, 10, 7, 9, 5, 3, 2, 2, false},
  };
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> uniform(-1, 1);
  for (const Case& c : cases) {
    const ConvGeometry g = conv_geometry(c.N, c.C, c.H, c.W, c.O, c.kh, c.kw, c.stride, c.padding);
    INFO("N " << c.N << " C " << c.C << " H " << c.H << " W " << c.W << " O " << c.O << " kernel " << c.kh << "x"
              << c.kw << " stride " << c.stride << " padding " << c.padding << " bias " << c.bias);
    std::vector<float> x(size_t(c.N * c.C * c.H * c.W)), w(size_t(c.O * g.K)), b(size_t(c.O));
    for (auto* v : {&x, &w, &b})
      for (float& e : *v) e = uniform(rng);
    const float* bias = c.bias ? b.data() : nullptr;
    const std::vector<double> want = reference(g, x, w, bias);
    const std::vector<float> got = run_blocks(g, x, w, bias);
    REQUIRE(got.size() == want.size());
    double worst = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(std::isfinite(got[i]));  // every output written
      // float32 sums of K products of values in [-1, 1]: error within K * 2^-24 * |terms|.
      worst = std::max(worst, std::abs(double(got[i]) - want[i]));
    }
    CHECK(worst <= 1e-6 * double(g.K + 1));
  }
}

TEST_CASE("a NaN or an infinity in the GPU convolution's input reaches exactly the outputs whose windows hold it") {
  // K = 9 leaves 7 unused rows in the slice: they must read nothing (a zero weight times
  // an infinity would make NaN of an output that should be infinite).
  const ConvGeometry g = conv_geometry(2, 1, 9, 9, 4, 3, 3, 1, 1);
  std::vector<float> x(size_t(2 * 81), 0.5f), w(size_t(4 * 9), 0.25f);
  x[4 * 9 + 4] = NAN;       // image 0, row 4, column 4
  x[81 + 8 * 9 + 0] = NAN;  // image 1, bottom-left corner
  x[1 * 9 + 7] = INFINITY;  // image 0, row 1, column 7: windows apart from the NaN's
  const std::vector<double> want = reference(g, x, w, nullptr);
  const std::vector<float> got = run_blocks(g, x, w, nullptr);
  int nans = 0, infs = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i);
    REQUIRE(std::isnan(got[i]) == std::isnan(want[i]));
    nans += std::isnan(want[i]), infs += std::isinf(want[i]);
    if (std::isinf(want[i]))
      CHECK(double(got[i]) == want[i]);
    else if (!std::isnan(want[i]))
      CHECK(std::abs(got[i] - want[i]) <= 1e-6);
  }
  CHECK(nans == 4 * (9 + 4));  // per channel: the 3x3 outputs around one, the 2x2 at the corner
  CHECK(infs == 4 * 9);        // per channel: the 3x3 outputs around it
}

TEST_CASE("the GPU convolution's blocks cover the output: 128 pixels by 64 channels each") {
  const ConvGeometry g = conv_geometry(256, 32, 14, 14, 64, 3, 3, 1, 1);
  CHECK(g.OH == 14);
  CHECK(g.K == 288);
  CHECK(g.P == 256 * 196);
  CHECK(blocks_along_pixels(g) == 392);
  CHECK(blocks_along_channels(g) == 1);
  const ConvGeometry h = conv_geometry(1, 1, 5, 5, 65, 3, 3, 2, 0);
  CHECK(h.OH == 2);
  CHECK(blocks_along_pixels(h) == 1);
  CHECK(blocks_along_channels(h) == 2);
}
