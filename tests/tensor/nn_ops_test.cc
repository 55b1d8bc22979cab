// The fused ops of tensor/nn_ops.h against direct formulas: both column layouts hold the
// same windows, col2im is im2col's adjoint in each, cross-entropy matches log-softmax,
// and its gradient matches finite differences of the loss; the per-image convolution
// equals im2col + one GEMM.
#include <cmath>

#include <vector>

#include "catch2/catch.hpp"
#include "tensor/columns_cpu.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

using namespace engine;

TEST_CASE("im2col's two layouts hold the same windows, and col2im is the adjoint of each") {
  manual_seed(3);
  const Tensor x = randn({3, 2, 5, 6});
  const int64_t kh = 3, kw = 2, s = 2, p = 1;
  const int64_t OH = window_out_size(5, kh, s, p), OW = window_out_size(6, kw, s, p);
  const Tensor per_image = im2col(x, kh, kw, s, p);  // (N, C*kh*kw, L)
  const Tensor side = im2col(x, kh, kw, s, p, ColumnLayout::BatchInColumns);
  REQUIRE(side.shape() == Shape{2 * kh * kw, 3 * OH * OW});
  // (C*kh*kw, N*L) -> (C*kh*kw, N, L) -> (N, C*kh*kw, L)
  const Tensor back = side.reshape({2 * kh * kw, 3, OH * OW}).permute({1, 0, 2});
  CHECK(max(abs(back - per_image)).item() == 0);
  for (ColumnLayout layout : {ColumnLayout::PerImage, ColumnLayout::BatchInColumns}) {
    const Tensor cols = im2col(x, kh, kw, s, p, layout);
    const Tensor c = randn(cols.shape());
    const double lhs = sum(cols * c).item(), rhs = sum(x * col2im(c, x.shape(), kh, kw, s, p, layout)).item();
    CHECK(std::abs(lhs - rhs) < 1e-4 * (1 + std::abs(lhs)));
  }
  CHECK_THROWS_WITH(col2im(zeros({4, 4}), x.shape(), kh, kw, s, p), Catch::Contains("do not fit image"));
}

TEST_CASE("im2col equals its definition, and col2im its adjoint, for strides, paddings and kernels past the image") {
  manual_seed(4);
  struct Case {
    int64_t H, W, kh, kw, s, p;
  };
  for (const Case k : {Case{5, 6, 3, 3, 1, 1}, Case{5, 6, 3, 2, 2, 1}, Case{7, 7, 3, 3, 3, 0}, Case{1, 1, 3, 3, 2, 1},
                       Case{2, 3, 3, 3, 2, 1}, Case{6, 5, 2, 4, 1, 2}, Case{4, 4, 1, 1, 1, 0}, Case{3, 37, 3, 3, 1, 1},
                       Case{4, 20, 1, 3, 1, 2}, Case{4, 20, 5, 3, 1, 1}, Case{9, 3, 3, 3, 1, 1}}) {
    INFO("H " << k.H << " W " << k.W << " kernel " << k.kh << "x" << k.kw << " stride " << k.s << " padding " << k.p);
    const Tensor x = randn({2, 3, k.H, k.W});
    const int64_t OH = window_out_size(k.H, k.kh, k.s, k.p), OW = window_out_size(k.W, k.kw, k.s, k.p), L = OH * OW;
    const Tensor cols = im2col(x, k.kh, k.kw, k.s, k.p, ColumnLayout::BatchInColumns);
    const Tensor per_image = im2col(x, k.kh, k.kw, k.s, k.p, ColumnLayout::PerImage);
    REQUIRE(cols.shape() == Shape{3 * k.kh * k.kw, 2 * L});
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t i = 0; i < k.kh; ++i)
          for (int64_t j = 0; j < k.kw; ++j)
            for (int64_t oy = 0; oy < OH; ++oy)
              for (int64_t ox = 0; ox < OW; ++ox) {
                const int64_t y = oy * k.s + i - k.p, xx = ox * k.s + j - k.p;
                const double want = y >= 0 && y < k.H && xx >= 0 && xx < k.W ? x.at({n, c, y, xx}) : 0.0;
                REQUIRE(cols.at({(c * k.kh + i) * k.kw + j, n * L + oy * OW + ox}) == want);
                REQUIRE(per_image.at({n, (c * k.kh + i) * k.kw + j, oy * OW + ox}) == want);
              }
    const Tensor g = randn(cols.shape());
    const Tensor back = col2im(g, x.shape(), k.kh, k.kw, k.s, k.p, ColumnLayout::BatchInColumns);
    const double lhs = sum(cols * g).item(), rhs = sum(x * back).item();
    CHECK(std::abs(lhs - rhs) < 1e-4 * (1 + std::abs(lhs)));
    // Each pixel's sum exactly, in col2im's order: kernel row by row, then column.
    for (int64_t n = 0; n < 2; ++n)
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t y = 0; y < k.H; ++y)
          for (int64_t xx = 0; xx < k.W; ++xx) {
            float want = 0.0f;
            for (int64_t i = 0; i < k.kh; ++i)
              for (int64_t j = 0; j < k.kw; ++j) {
                const int64_t ty = y + k.p - i, tx = xx + k.p - j;  // = (oy, ox) times the stride
                if (ty < 0 || tx < 0 || ty % k.s || tx % k.s || ty / k.s >= OH || tx / k.s >= OW) continue;
                want += float(g.at({(c * k.kh + i) * k.kw + j, n * L + ty / k.s * OW + tx / k.s}));
              }
            REQUIRE(back.at({n, c, y, xx}) == want);
          }
    const Tensor g_per_image = g.reshape({3 * k.kh * k.kw, 2, L}).permute({1, 0, 2}).contiguous();
    const Tensor back_per_image = col2im(g_per_image, x.shape(), k.kh, k.kw, k.s, k.p, ColumnLayout::PerImage);
    REQUIRE(back_per_image.to_vector<float>() == back.to_vector<float>());
  }
}

// The whole-batch path conv2d takes on a GPU: im2col with the batch side by side, one GEMM,
// a permuted copy; its backward as the same two products and col2im.
struct WholeBatch {
  Tensor out, dx, dw, dbias;
};
WholeBatch whole_batch_conv(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& g, int64_t s, int64_t p) {
  const int64_t N = x.size(0), O = w.size(0), kh = w.size(2), kw = w.size(3);
  const int64_t OH = window_out_size(x.size(2), kh, s, p), OW = window_out_size(x.size(3), kw, s, p);
  const Tensor cols = im2col(x, kh, kw, s, p, ColumnLayout::BatchInColumns);
  const Tensor w2 = w.reshape({O, -1});
  const Tensor out = (matmul(w2, cols) + b.reshape({O, 1})).reshape({O, N, OH, OW}).permute({1, 0, 2, 3});
  const Tensor g2 = g.permute({1, 0, 2, 3}).contiguous().reshape({O, N * OH * OW});
  return {out.contiguous(),
          col2im(matmul(w2.transpose(0, 1), g2), x.shape(), kh, kw, s, p, ColumnLayout::BatchInColumns),
          matmul(g2, cols.transpose(0, 1)).reshape(w.shape()), sum(g2, {1})};
}

TEST_CASE("im2col into rows a given distance apart: the same rows, and the floats between them untouched") {
  manual_seed(4);
  for (const int64_t s : {1, 2}) {  // the AVX-512 path (stride 1, where the CPU has it) and the general one
    const Tensor x = randn({2, 3, 7, 37});
    const Tensor dense = im2col(x, 3, 3, s, 1);  // (N, rows, L)
    const int64_t rows = dense.size(1), L = dense.size(2), ld = L + 5;
    std::vector<float> spaced(static_cast<size_t>(2 * rows * ld), 7.0f);
    detail::im2col_cpu(x.data<float>(), x.shape(), 3, 3, s, 1, ColumnLayout::PerImage, spaced.data(), ld);
    for (int64_t r = 0; r < 2 * rows; ++r)
      for (int64_t l = 0; l < ld; ++l) {
        INFO("stride " << s << " row " << r << " column " << l);
        const float got = spaced[static_cast<size_t>(r * ld + l)];
        REQUIRE(got == (l < L ? dense.data<float>()[r * L + l] : 7.0f));
      }
  }
}

TEST_CASE("conv2d one image at a time: forward and dx bit for bit the whole-batch product, dW and dbias to rounding") {
  manual_seed(5);
  struct Case {
    int64_t N, C, H, W, O, kh, kw, s, p;
  };
  // The lessons' two layers, strides, paddings, a kernel past the image, 1x1, and more
  // than 256 column rows (the GEMM's K in two blocks).
  for (const Case& k :
       {Case{3, 1, 28, 28, 32, 3, 3, 1, 1}, Case{2, 32, 14, 14, 64, 3, 3, 1, 1}, Case{2, 3, 7, 6, 5, 3, 2, 2, 1},
        Case{1, 2, 2, 3, 4, 3, 3, 2, 1}, Case{3, 4, 5, 5, 6, 1, 1, 1, 0}, Case{2, 40, 6, 5, 7, 3, 3, 1, 1}}) {
    INFO("N " << k.N << " C " << k.C << " " << k.H << "x" << k.W << " O " << k.O << " kernel " << k.kh << "x" << k.kw
              << " stride " << k.s << " padding " << k.p);
    const Tensor x = randn({k.N, k.C, k.H, k.W}), w = randn({k.O, k.C, k.kh, k.kw}), b = randn({k.O});
    const Tensor out = conv2d_forward(x, w, b, k.s, k.p);
    const Tensor g = randn(out.shape());
    const WholeBatch ref = whole_batch_conv(x, w, b, g, k.s, k.p);
    REQUIRE(out.shape() == ref.out.shape());
    CHECK(max(abs(out - ref.out)).item() == 0);
    const Conv2dGrads d = conv2d_backward(g, x, w, k.s, k.p, true, true, true);
    CHECK(max(abs(d.dx - ref.dx)).item() == 0);
    // dW sums N*L products one image at a time instead of in one run: rounding apart.
    const double scale = 1 + max(abs(ref.dw)).item();
    CHECK(max(abs(d.dw - ref.dw)).item() < 1e-5 * scale * std::sqrt(double(k.N * out.size(2) * out.size(3))));
    CHECK(max(abs(d.dbias - ref.dbias)).item() < 1e-4 * (1 + max(abs(ref.dbias)).item()));
    const Conv2dGrads only_w = conv2d_backward(g, x, w, k.s, k.p, false, true, false);
    CHECK(!only_w.dx.defined());
    CHECK(!only_w.dbias.defined());
    CHECK(max(abs(only_w.dw - d.dw)).item() == 0);
  }
  CHECK_THROWS_WITH(conv2d_forward(zeros({1, 2, 5, 5}), zeros({3, 2, 3, 3}), zeros({4}), 1, 0),
                    Catch::Contains("[conv2d] bias must be (3,) float32 on the CPU, got (4,) float32 on cpu"));
  CHECK_THROWS_WITH(conv2d_forward(zeros({1, 2, 5, 5}), zeros({3, 4, 3, 3}), Tensor(), 1, 0),
                    Catch::Contains("[conv2d] input (1,2,5,5) does not fit weight (3,4,3,3)"));
  CHECK_THROWS_WITH(
      conv2d_backward(zeros({1, 2, 5, 5}), zeros({1, 2, 5, 5}), zeros({3, 2, 3, 3}), 1, 1, true, true, true),
      Catch::Contains("does not fit the output of 1 images x 3 channels x 25 positions"));
}

TEST_CASE("cross-entropy: the loss is -mean log_softmax at the target, the gradient matches finite differences") {
  manual_seed(5);
  Tensor x = randn({4, 7}) * 3.0;
  const Tensor t = from_vector(std::vector<int64_t>{0, 6, 3, 3}, {4});
  const CrossEntropy ce = cross_entropy_forward(x, t);
  const Tensor ls = x - (max(x, {-1}, true) + log(sum(exp(x - max(x, {-1}, true)), {-1}, true)));
  double want = 0;
  for (int64_t i = 0; i < 4; ++i) want -= ls.at({i, int64_t(t.at({i}))});
  CHECK(std::abs(ce.loss.item() - want / 4) < 1e-6);
  const Tensor d = cross_entropy_backward(ce, t, scalar_tensor(1.0));
  const double h = 1e-3;
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 7; ++j) {
      const double v = x.at({i, j});
      x.narrow(0, i, 1).narrow(1, j, 1).fill_(v + h);
      const double up = cross_entropy_forward(x, t).loss.item();
      x.narrow(0, i, 1).narrow(1, j, 1).fill_(v - h);
      const double down = cross_entropy_forward(x, t).loss.item();
      x.narrow(0, i, 1).narrow(1, j, 1).fill_(v);
      CHECK(std::abs(d.at({i, j}) - (up - down) / (2 * h)) < 2e-3);
    }
  CHECK_THROWS_WITH(cross_entropy_forward(x, from_vector(std::vector<int64_t>{0, 7, 0, 0}, {4})),
                    Catch::Contains("target 7 at index 1 is out of range"));
}

TEST_CASE("batch_norm_eval_forward: (x - mean) / sqrt(var + eps) weight + bias per channel, then ReLU and a 2x2 pool") {
  Generator gen(9);
  const int64_t N = 3, C = 4, H = 5, W = 6;
  const Tensor x = randn({N, C, H, W}, &gen), rm = randn({C}, &gen) * 2.0, rv = rand({C}, &gen) * 3.0 + 0.1,
               w = randn({C}, &gen), b = randn({C}, &gen);
  const double eps = 1e-3;
  const auto want = [&](int64_t n, int64_t c, int64_t h, int64_t wi) {  // the layer's formula, in double
    const double v = x.at({n, c, h, wi});
    return (v - rm.at({c})) / std::sqrt(rv.at({c}) + eps) * w.at({c}) + b.at({c});
  };
  const auto near = [](double got, double exp) { REQUIRE(std::fabs(got - exp) <= std::fabs(exp) * 1e-5 + 1e-6); };
  for (const bool relu : {false, true}) {
    const Tensor y = batch_norm_eval_forward(x, rm, rv, w, b, eps, relu, false);
    REQUIRE(y.shape() == x.shape());
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t h = 0; h < H; ++h)
          for (int64_t wi = 0; wi < W; ++wi)
            near(y.at({n, c, h, wi}), relu ? std::max(0.0, want(n, c, h, wi)) : want(n, c, h, wi));
  }
  if (batch_norm_relu_pool2_applies(x)) {  // the pool: each 2x2 window's largest, after the ReLU
    const Tensor y = batch_norm_eval_forward(x, rm, rv, w, b, eps, true, true);
    REQUIRE(y.shape() == Shape{N, C, H / 2, W / 2});
    for (int64_t n = 0; n < N; ++n)
      for (int64_t c = 0; c < C; ++c)
        for (int64_t i = 0; i < H / 2; ++i)
          for (int64_t j = 0; j < W / 2; ++j) {
            double m = 0;
            for (int64_t d = 0; d < 4; ++d) m = std::max(m, want(n, c, 2 * i + d / 2, 2 * j + d % 2));
            near(y.at({n, c, i, j}), m);
          }
  }
  REQUIRE_THROWS_WITH(batch_norm_eval_forward(x, rm, rv, w.narrow(0, 0, 3), b, eps, false, false),
                      Catch::Contains("weight and bias need 4 values, got 3 and 4"));
  REQUIRE_THROWS_WITH(batch_norm_eval_forward(x, rm, rv.narrow(0, 0, 2), w, b, eps, false, false),
                      Catch::Contains("the running statistics need 4 float32 values, got 4 and 2"));
  REQUIRE_THROWS_WITH(batch_norm_eval_forward(x, rm, rv, w, b, eps, false, true),
                      Catch::Contains("the fused 2x2 pool needs relu"));
}
