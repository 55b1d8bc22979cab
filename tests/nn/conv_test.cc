// Conv2d and MaxPool2d against direct loops (stride and padding), their gradients against
// finite differences; Dropout; BatchNorm in train and eval.
#include <climits>
#include <cmath>

#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "tensor/nn_ops.h"
#include "tests/testing/gradcheck.h"
#include "tests/testing/same_values.h"

using namespace engine;
using namespace engine::nn;
using engine::testing::check_gradients;
using Vs = std::vector<Variable>;

namespace {
Generator gen(5);

// The definition of a 2-D cross-correlation, as nested loops.
Tensor conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, int64_t s, int64_t p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = w.size(0), K = w.size(2);
  const int64_t OH = (H + 2 * p - K) / s + 1, OW = (W + 2 * p - K) / s + 1;
  Tensor out = zeros({N, O, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double acc = b.defined() ? b.at({o}) : 0.0;
          for (int64_t c = 0; c < C; ++c)
            for (int64_t i = 0; i < K; ++i)
              for (int64_t j = 0; j < K; ++j) {
                const int64_t y = oy * s + i - p, xx = ox * s + j - p;
                if (y >= 0 && y < H && xx >= 0 && xx < W) acc += x.at({n, c, y, xx}) * w.at({o, c, i, j});
              }
          out.data<float>()[((n * O + o) * OH + oy) * OW + ox] = float(acc);
        }
  return out;
}

Tensor pool_reference(const Tensor& x, int64_t k, int64_t s, int64_t p) {
  const int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  const int64_t OH = (H + 2 * p - k) / s + 1, OW = (W + 2 * p - k) / s + 1;
  Tensor out = empty({N, C, OH, OW});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t oy = 0; oy < OH; ++oy)
        for (int64_t ox = 0; ox < OW; ++ox) {
          double best = -INFINITY;
          for (int64_t i = 0; i < k; ++i)
            for (int64_t j = 0; j < k; ++j) {
              const int64_t y = oy * s + i - p, xx = ox * s + j - p;
              if (y >= 0 && y < H && xx >= 0 && xx < W) best = std::max(best, x.at({n, c, y, xx}));
            }
          out.data<float>()[((n * C + c) * OH + oy) * OW + ox] = float(best);
        }
  return out;
}

double max_diff(const Tensor& a, const Tensor& b) {
  REQUIRE(a.shape() == b.shape());
  return max(abs(a - b)).item();
}
}  // namespace

TEST_CASE("conv2d matches the direct loops for several strides and paddings") {
  for (auto [s, p, k] : std::vector<std::tuple<int64_t, int64_t, int64_t>>{
           {1, 0, 3}, {1, 1, 3}, {2, 1, 3}, {2, 0, 2}, {3, 2, 5}, {1, 0, 1}}) {
    INFO("stride " << s << " padding " << p << " kernel " << k);
    const Tensor x = randn({2, 3, 9, 8}, &gen), w = randn({4, 3, k, k}, &gen), b = randn({4}, &gen);
    const Tensor got = conv2d(Variable(x), Variable(w), Variable(b), s, p).data();
    REQUIRE(max_diff(got, conv_reference(x, w, b, s, p)) < 1e-4);
    REQUIRE(max_diff(conv2d(Variable(x), Variable(w), Variable(), s, p).data(), conv_reference(x, w, Tensor(), s, p)) <
            1e-4);
  }
}

TEST_CASE("col2im is the adjoint of im2col: <im2col(x), c> = <x, col2im(c)>") {
  const Tensor x = randn({2, 2, 5, 6}, &gen);
  const Tensor cols = im2col(x, 3, 3, 2, 1);
  const Tensor c = randn(cols.shape(), &gen);
  const double lhs = sum(cols * c).item(), rhs = sum(x * col2im(c, x.shape(), 3, 3, 2, 1)).item();
  REQUIRE(lhs == Approx(rhs).epsilon(1e-4));
}

TEST_CASE("conv2d gradients match finite differences") {
  check_gradients("conv2d s1 p1", [](const Vs& v) { return conv2d(v[0], v[1], v[2], 1, 1); },
                  {randn({2, 2, 5, 5}, &gen), randn({3, 2, 3, 3}, &gen), randn({3}, &gen)});
  check_gradients("conv2d s2 p0", [](const Vs& v) { return conv2d(v[0], v[1], v[2], 2, 0); },
                  {randn({1, 2, 6, 7}, &gen), randn({2, 2, 2, 2}, &gen), randn({2}, &gen)});
}

TEST_CASE("an unbatched (C, H, W) image: the batch of one's result and gradients, without the batch dim") {
  Generator gen(5);
  const Tensor img = randn({2, 6, 7}, &gen), w = randn({3, 2, 3, 3}, &gen), b = randn({3}, &gen);
  // The same image as a batch of one, through the batched path.
  Variable xb(img.unsqueeze(0).contiguous(), true), wb(w.clone(), true), bb(b.clone(), true);
  Variable yb = max_pool2d(conv2d(xb, wb, bb, 2, 1), 2, 2, 1);
  // The image itself: conv gives (3, 3, 4), the pool (3, 2, 3).
  Variable x(img.clone(), true), wu(w.clone(), true), bu(b.clone(), true);
  Variable conv = conv2d(x, wu, bu, 2, 1);
  REQUIRE(conv.shape() == Shape{3, 3, 4});
  Variable y = max_pool2d(conv, 2, 2, 1);
  REQUIRE(y.shape() == Shape{3, 2, 3});
  REQUIRE(y.data().to_vector<float>() == yb.data().to_vector<float>());
  const Tensor g = randn({3, 2, 3}, &gen);
  sum(yb * Variable(g.unsqueeze(0))).backward();
  sum(y * Variable(g)).backward();
  REQUIRE(x.grad().shape() == Shape{2, 6, 7});
  REQUIRE(x.grad().to_vector<float>() == xb.grad().to_vector<float>());
  REQUIRE(wu.grad().to_vector<float>() == wb.grad().to_vector<float>());
  REQUIRE(bu.grad().to_vector<float>() == bb.grad().to_vector<float>());
  // The layers take it too.
  Conv2d layer(2, 3, 3, 1, 1);
  REQUIRE(layer.forward(Variable(img)).shape() == Shape{3, 6, 7});
  REQUIRE(MaxPool2d(2).forward(Variable(img)).shape() == Shape{2, 3, 3});
}

TEST_CASE("conv2d errors name the shapes") {
  REQUIRE_THROWS_WITH(conv2d(Variable(zeros({1, 2, 5, 5})), Variable(zeros({3, 4, 3, 3})), Variable(), 1, 0),
                      Catch::Contains("[conv2d] input has 2 channels but the weight expects 4"));
  REQUIRE_THROWS_WITH(
      conv2d(Variable(zeros({5, 5})), Variable(zeros({3, 2, 3, 3})), Variable(), 1, 0),
      Catch::Contains("[conv2d] expects input (N, C, H, W) or an unbatched (C, H, W), got shape (5,5)"));
  REQUIRE_THROWS_WITH(max_pool2d(Variable(zeros({1, 1, 1, 4, 4})), 2, 2),
                      Catch::Contains("[max_pool2d] expects input (N, C, H, W) or an unbatched (C, H, W)"));
  REQUIRE_THROWS_WITH(conv2d(Variable(zeros({1, 1, 2, 2})), Variable(zeros({1, 1, 3, 3})), Variable(), 1, 0),
                      Catch::Contains("larger than the padded input"));
  // Window sizes are range-checked before any size is computed from them (H + 2 padding
  // would overflow int64 here), for conv2d and max_pool2d alike.
  const Variable x(zeros({1, 1, 4, 4})), w(zeros({1, 1, 3, 3}));
  REQUIRE_THROWS_WITH(
      conv2d(x, w, Variable(), 1, INT64_MAX / 2),
      Catch::Contains("[conv2d] kernel 3x3, stride 1 and padding 4611686018427387903 must each be at most"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Variable(), INT64_MAX, 0), Catch::Contains("stride 9223372036854775807"));
  REQUIRE_THROWS_WITH(conv2d(x, w, Variable(), 0, 0),
                      Catch::Contains("needs kernel > 0, stride > 0, padding >= 0, got kernel 3x3, stride 0"));
  REQUIRE_THROWS_WITH(max_pool2d(x, INT64_MAX, 1),
                      Catch::Contains("[max_pool2d] kernel") && Catch::Contains("must each be at most"));
  // The layer says so when it is built.
  REQUIRE_THROWS_WITH(Conv2d(3, 4, 3, 0), Catch::Contains("[Conv2d] needs stride > 0 and padding >= 0, got stride 0"));
  REQUIRE_THROWS_WITH(Conv2d(3, 4, 3, 1, -1), Catch::Contains("got stride 1, padding -1"));
}

TEST_CASE("max_pool2d matches the direct loops and routes gradients to the maxima") {
  for (auto [k, s, p] :
       std::vector<std::tuple<int64_t, int64_t, int64_t>>{{2, 2, 0}, {3, 2, 1}, {3, 1, 0}, {2, 1, 1}}) {
    INFO("kernel " << k << " stride " << s << " padding " << p);
    const Tensor x = randn({2, 3, 7, 6}, &gen);
    REQUIRE(max_diff(max_pool2d(Variable(x), k, s, p).data(), pool_reference(x, k, s, p)) == 0);
  }
  check_gradients("max_pool2d", [](const Vs& v) { return max_pool2d(v[0], 2, 2); }, {randn({1, 2, 4, 6}, &gen)});
  check_gradients("max_pool2d overlapping", [](const Vs& v) { return max_pool2d(v[0], 3, 2, 1); },
                  {randn({1, 1, 5, 5}, &gen)});
  REQUIRE(MaxPool2d(2)(Variable(zeros({1, 1, 28, 28}))).shape() == Shape{1, 1, 14, 14});
  // 2x2 at stride 2 has its own (vector) loop: rows of 15 outputs (8 + a tail of 7), odd
  // heights, many ties (values 0..3) and some NaNs. Values as the reference (NaN where the
  // window holds one), and each gradient goes to the window's first maximum, row by row,
  // or its first NaN: the general loop's rule.
  Tensor x = randint(0, 4, {2, 3, 7, 30}, &gen).to(DType::Float32);
  for (int64_t i = 0; i < x.numel(); i += 37) x.data<float>()[i] = NAN;
  Variable v(x, true);
  Variable y = max_pool2d(v, 2, 2);
  sum(y).backward();
  const float* px = x.data<float>();
  const auto got = y.data().to_vector<float>(), grad = v.grad().to_vector<float>();
  std::vector<float> want_grad(static_cast<size_t>(x.numel()), 0.0f);
  for (int64_t plane = 0; plane < 6; ++plane)
    for (int64_t oy = 0; oy < 3; ++oy)
      for (int64_t ox = 0; ox < 15; ++ox) {
        int64_t best = (plane * 7 + 2 * oy) * 30 + 2 * ox;
        for (int64_t i : {int64_t(0), int64_t(1), int64_t(30), int64_t(31)}) {
          const int64_t at = (plane * 7 + 2 * oy) * 30 + 2 * ox + i;
          if (px[at] > px[best] || (std::isnan(px[at]) && !std::isnan(px[best]))) best = at;
        }
        const float o = got[size_t((plane * 3 + oy) * 15 + ox)];
        INFO("plane " << plane << " oy " << oy << " ox " << ox);
        REQUIRE((o == px[best] || (std::isnan(o) && std::isnan(px[best]))));
        want_grad[size_t(best)] += 1;
      }
  REQUIRE(grad == want_grad);
}

TEST_CASE("Conv2d starts where PyTorch's would") {
  Conv2d conv(8, 16, 3, 1, 1, true, &gen);
  const double b = 1.0 / std::sqrt(8.0 * 9.0);
  REQUIRE(max(abs(conv.weight.data())).item() <= b);
  REQUIRE(var(conv.weight.data()).item() == Approx(b * b / 3).epsilon(0.1));
  REQUIRE(conv(Variable(zeros({2, 8, 10, 10}))).shape() == Shape{2, 16, 10, 10});
  std::vector<std::string> names;
  for (auto& [n, p] : conv.named_parameters()) names.push_back(n);
  REQUIRE(names == std::vector<std::string>{"weight", "bias"});
}

TEST_CASE("Dropout zeroes about p of the elements, rescales the rest, and is off in eval") {
  Dropout drop(0.3, &gen);
  const Tensor x = ones({100000});
  Variable v(x, true);
  Variable y = drop(v);
  const double kept = mean(gt(y.data(), zeros({}))).item();
  REQUIRE(kept == Approx(0.7).margin(0.01));
  REQUIRE(max(y.data()).item() == Approx(1 / 0.7));
  autograd::sum(y).backward();
  REQUIRE(max(abs(v.grad() - y.data())).item() == 0);  // the gradient is the mask itself
  drop.eval();
  REQUIRE(drop(Variable(x)).data().storage() == x.storage());
}

TEST_CASE("Dropout(1) zeroes everything and its gradient, as PyTorch's; p outside [0, 1] is refused") {
  Dropout all(1.0, &gen);
  Variable v(tensor({1, -2, 3}), true);
  Variable y = all(v);
  REQUIRE(y.data().to_vector<float>() == std::vector<float>{0, 0, 0});  // not NaN: no 1 / (1 - p)
  autograd::sum(y).backward();
  REQUIRE(v.grad().to_vector<float>() == std::vector<float>{0, 0, 0});
  for (double p : {-0.1, 1.5, double(NAN)})
    REQUIRE_THROWS_WITH(Dropout(p), Catch::Contains("[Dropout] probability must be in [0, 1]"));
}

TEST_CASE("BatchNorm2d in training normalises per channel and updates running statistics") {
  BatchNorm2d bn(3);
  const Tensor x = randn({4, 3, 5, 5}, &gen) * 2.0 + 1.5;
  Variable y = bn(Variable(x));
  const Tensor m = mean(y.data(), {0, 2, 3}), v = var(y.data(), {0, 2, 3}, false, 0);
  for (int c = 0; c < 3; ++c) {
    REQUIRE(m.at({c}) == Approx(0).margin(1e-5));
    REQUIRE(v.at({c}) == Approx(1).margin(1e-3));
  }
  // running = 0.9 * initial + 0.1 * batch statistic (unbiased variance)
  const Tensor bm = mean(x, {0, 2, 3}), bv = var(x, {0, 2, 3}, false, 1);
  for (int c = 0; c < 3; ++c) {
    REQUIRE(bn.running_mean.at({c}) == Approx(0.1 * bm.at({c})).epsilon(1e-5));
    REQUIRE(bn.running_var.at({c}) == Approx(0.9 + 0.1 * bv.at({c})).epsilon(1e-5));
  }
  REQUIRE(bn.num_batches_tracked.item() == 1);
  REQUIRE(bn.state_dict().count("running_var") == 1);
  // Eval uses the running statistics: (x - rm) / sqrt(rv + eps).
  bn.eval();
  const Tensor e = bn(Variable(x)).data();
  const double expect = (x.at({1, 2, 3, 4}) - bn.running_mean.at({2})) / std::sqrt(bn.running_var.at({2}) + 1e-5);
  REQUIRE(e.at({1, 2, 3, 4}) == Approx(expect).epsilon(1e-4));
  REQUIRE(bn.num_batches_tracked.item() == 1);  // eval does not update
}

TEST_CASE("BatchNorm gradients match finite differences; shapes are checked") {
  check_gradients(
      "batchnorm2d train",
      [](const Vs& v) {
        BatchNorm2d bn(2);
        bn.weight = v[1];
        bn.bias = v[2];
        return bn(v[0]);
      },
      {randn({3, 2, 2, 2}, &gen), randn({2}, &gen), randn({2}, &gen)}, 1e-2, 3e-2);
  check_gradients(
      "batchnorm1d train", [](const Vs& v) { return BatchNorm1d(3)(v[0]); }, {randn({5, 3}, &gen)}, 1e-2, 3e-2);
  REQUIRE(BatchNorm1d(3)(Variable(randn({4, 3, 6}, &gen))).shape() == Shape{4, 3, 6});
  REQUIRE_THROWS_WITH(BatchNorm2d(3)(Variable(zeros({2, 4, 2, 2}))),
                      Catch::Contains("[BatchNorm] expects input with 4 dims and 3 channels"));
  REQUIRE_THROWS_WITH(BatchNorm1d(3)(Variable(zeros({1, 3}))), Catch::Contains("more than 1 value per channel"));
  // eps and momentum out of range (or NaN) would poison the normalisation or the running statistics.
  REQUIRE_THROWS_WITH(BatchNorm2d(3, -1e-5), Catch::Contains("[BatchNorm] eps must be in [0, 1], got -1e-05"));
  REQUIRE_THROWS_WITH(BatchNorm2d(3, NAN), Catch::Contains("[BatchNorm] eps must be in [0, 1], got nan"));
  REQUIRE_THROWS_WITH(BatchNorm2d(3, 1e-5, 2), Catch::Contains("[BatchNorm] momentum must be in [0, 1], got 2"));
  REQUIRE_THROWS_WITH(BatchNorm1d(3, 1e-5, NAN), Catch::Contains("momentum must be in [0, 1], got nan"));
}

TEST_CASE("Sequential runs BatchNorm then ReLU as one fused step: the values and gradients of the two layers") {
  for (const Shape& shape : {Shape{4, 3, 5, 6}, Shape{6, 3}}) {
    INFO("input " << shape_str(shape));
    const bool images = shape.size() == 4;
    auto make_bn = [&]() -> ModulePtr {
      if (images) return std::make_shared<BatchNorm2d>(3);
      return std::make_shared<BatchNorm1d>(3);
    };
    ModulePtr fused_bn = make_bn(), plain_bn = make_bn();
    auto& a = static_cast<BatchNorm&>(*fused_bn);
    auto& b = static_cast<BatchNorm&>(*plain_bn);
    const Tensor w = randn({3}, &gen), bias = randn({3}, &gen) * 0.5;  // some channels mostly below 0
    a.weight = Variable(w.clone(), true);
    a.bias = Variable(bias.clone(), true);
    b.weight = Variable(w.clone(), true);
    b.bias = Variable(bias.clone(), true);
    Sequential seq({fused_bn, std::make_shared<ReLU>()});
    const Tensor x = randn(shape, &gen), g = randn(shape, &gen);
    Variable xa(x.clone(), true), xb(x.clone(), true);
    Variable ya = seq(xa), yb = autograd::relu(b(xb));
    REQUIRE(ya.grad_fn_name() == "batch_norm_relu");  // one fused step ran
    REQUIRE(max(abs(ya.data() - yb.data())).item() == 0);
    REQUIRE(min(ya.data()).item() == 0);  // the ReLU did cut something
    autograd::sum(ya * Variable(g)).backward();
    autograd::sum(yb * Variable(g)).backward();
    CHECK(max(abs(xa.grad() - xb.grad())).item() == 0);
    CHECK(max(abs(a.weight.grad() - b.weight.grad())).item() == 0);
    CHECK(max(abs(a.bias.grad() - b.bias.grad())).item() == 0);
    CHECK(max(abs(a.running_mean - b.running_mean)).item() == 0);
    CHECK(max(abs(a.running_var - b.running_var)).item() == 0);
    seq.eval();  // eval: the running statistics, then the ReLU
    b.eval();
    CHECK(max(abs(seq(Variable(x)).data() - autograd::relu(b(Variable(x))).data())).item() == 0);
  }
  Sequential wrong({std::make_shared<BatchNorm2d>(3), std::make_shared<ReLU>()});
  REQUIRE_THROWS_WITH(wrong(Variable(zeros({2, 4, 2, 2}))),
                      Catch::Contains("[BatchNorm] expects input with 4 dims and 3 channels"));
}

TEST_CASE("BatchNorm fused with ReLU: NaN passes the ReLU forward and backward, as in the separate layers") {
  const Tensor x = randn({2, 2, 3, 3}, &gen);
  x.data<float>()[4] = std::nanf("");  // channel 0 becomes NaN everywhere (its mean is NaN)
  BatchNorm2d b(2);
  Variable xa(x.clone(), true), xb(x.clone(), true);
  Sequential seq({std::make_shared<BatchNorm2d>(2), std::make_shared<ReLU>()});
  Variable ya = seq(xa), yb = autograd::relu(b(xb));
  REQUIRE(ya.grad_fn_name() == "batch_norm_relu");
  REQUIRE(std::isnan(ya.data().at({0, 0, 1, 1})));
  testing::require_same(ya.data(), yb.data().to_vector<float>());
  autograd::sum(ya).backward();
  autograd::sum(yb).backward();
  testing::require_same(xa.grad(), xb.grad().to_vector<float>());
}

TEST_CASE("Sequential runs BatchNorm, ReLU and a 2x2 max-pool as one step: the values and gradients of the three") {
  // Even and odd sizes (the last row and column are then outside every window), rows of
  // more than 8 windows (the vector loops' width), a NaN, and the ties ReLU makes (windows
  // of zeros).
  for (const Shape& shape : {Shape{3, 4, 6, 8}, Shape{2, 3, 5, 7}, Shape{2, 2, 2, 2}, Shape{2, 2, 5, 37}}) {
    INFO("input " << shape_str(shape));
    auto fused_bn = std::make_shared<BatchNorm2d>(shape[1]);
    BatchNorm2d plain(shape[1]);
    const Tensor w = randn({shape[1]}, &gen), bias = randn({shape[1]}, &gen) * 0.5;
    fused_bn->weight = Variable(w.clone(), true);
    fused_bn->bias = Variable(bias.clone(), true);
    plain.weight = Variable(w.clone(), true);
    plain.bias = Variable(bias.clone(), true);
    Sequential seq({fused_bn, std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2)});
    Tensor x = randn(shape, &gen);
    if (shape[2] == 6) x.data<float>()[shape[2] * shape[3] + 3] = std::nanf("");  // image 0, channel 1
    Variable xa(x.clone(), true), xb(x.clone(), true);
    Variable ya = seq(xa), yb = max_pool2d(autograd::relu(plain(xb)), 2, 2, 0);
    REQUIRE(ya.grad_fn_name() == (batch_norm_relu_pool2_applies(x) ? "batch_norm_relu_max_pool2" : "max_pool2d"));
    testing::require_same(ya.data(), yb.data().to_vector<float>());
    const Tensor g = randn(ya.shape(), &gen);
    g.data<float>()[1] = -0.0f;  // the separate layers add it onto zeros: +0
    autograd::sum(ya * Variable(g)).backward();
    autograd::sum(yb * Variable(g)).backward();
    testing::require_same(xa.grad(), xb.grad().to_vector<float>());
    testing::require_same(fused_bn->weight.grad(), plain.weight.grad().to_vector<float>());
    testing::require_same(fused_bn->bias.grad(), plain.bias.grad().to_vector<float>());
    testing::require_same(fused_bn->running_mean, plain.running_mean.to_vector<float>());
    testing::require_same(fused_bn->running_var, plain.running_var.to_vector<float>());
    CHECK(fused_bn->num_batches_tracked.item() == 1);
  }
  const Tensor x = randn({2, 3, 4, 4}, &gen), w = ones({3}), b = zeros({3});
  if (batch_norm_relu_pool2_applies(x)) {
    const BatchNormReluPool r = batch_norm_relu_pool2_forward(x, w, b, 1e-5);
    CHECK_THROWS_WITH(batch_norm_relu_pool2_backward(zeros({2, 3, 4, 4}), x, r.bn, w),
                      Catch::Contains("[batch_norm_relu_pool2 backward] gradient of shape (2,3,4,4) for input"));
  }
  // Any other pool (3x3, or 2x2 at stride 1) runs as the separate layers.
  Sequential other({std::make_shared<BatchNorm2d>(2), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2, 1)});
  REQUIRE(other(Variable(randn({2, 2, 4, 4}, &gen))).grad_fn_name() == "max_pool2d");
}

TEST_CASE("BatchNorm, ReLU and a 2x2 max-pool run as one step on 16-bit input too (a convolution under autocast)") {
  // The 16-bit input is widened (a recorded cast), then the fused loops run: the same
  // values and parameter gradients as for the widened input given directly.
  const Tensor x = randn({2, 3, 6, 8}, &gen).to(DType::BFloat16);
  for (int relu_only = 0; relu_only < 2; ++relu_only) {
    auto bn_a = std::make_shared<BatchNorm2d>(3), bn_b = std::make_shared<BatchNorm2d>(3);
    std::vector<ModulePtr> la{bn_a, std::make_shared<ReLU>()}, lb{bn_b, std::make_shared<ReLU>()};
    if (!relu_only) {
      la.push_back(std::make_shared<MaxPool2d>(2));
      lb.push_back(std::make_shared<MaxPool2d>(2));
    }
    Sequential a(la), b(lb);
    Variable ya = a(Variable(x)), yb = b(Variable(x.to(DType::Float32)));
    const char* fused = relu_only ? "batch_norm_relu" : "batch_norm_relu_max_pool2";
    if (relu_only || batch_norm_relu_pool2_applies(x.to(DType::Float32))) REQUIRE(ya.grad_fn_name() == fused);
    REQUIRE(ya.data().dtype() == DType::Float32);
    testing::require_same(ya.data(), yb.data().to_vector<float>());
    autograd::sum(ya).backward();
    autograd::sum(yb).backward();
    testing::require_same(bn_a->weight.grad(), bn_b->weight.grad().to_vector<float>());
    testing::require_same(bn_a->bias.grad(), bn_b->bias.grad().to_vector<float>());
  }
}

TEST_CASE("BatchNorm in eval with no gradient recorded: one pass with the running statistics, the layers' values") {
  // Trained statistics far from 0 and 1, so that scale and shift matter; the same layers
  // with gradients recorded take the formula's path, (x - mean) / sqrt(var + eps) w + b.
  const auto trained = [](int64_t C, int dims) {
    auto bn = dims == 4 ? std::static_pointer_cast<BatchNorm>(std::make_shared<BatchNorm2d>(C))
                        : std::static_pointer_cast<BatchNorm>(std::make_shared<BatchNorm1d>(C));
    bn->running_mean.copy_(randn({C}, &gen) * 3.0);
    bn->running_var.copy_(rand({C}, &gen) * 4.0 + 0.01);
    bn->weight = Variable(randn({C}, &gen), true);
    bn->bias = Variable(randn({C}, &gen), true);
    bn->eval();
    return bn;
  };
  const auto close = [](const Tensor& got, const Tensor& want) {
    REQUIRE(got.shape() == want.shape());
    const auto g = got.to_vector<float>(), w = want.to_vector<float>();
    for (size_t i = 0; i < g.size(); ++i) {
      if (std::isnan(w[i])) {
        REQUIRE(std::isnan(g[i]));
        continue;
      }
      REQUIRE(std::fabs(g[i] - w[i]) <= std::fabs(w[i]) * 1e-5f + 1e-5f);  // a few roundings apart
    }
  };
  for (const Shape& shape : {Shape{3, 4, 6, 8}, Shape{2, 3, 5, 7}, Shape{5, 6}, Shape{2, 3, 9}}) {
    INFO("input " << shape_str(shape));
    auto bn = trained(shape[1], int(shape.size()));
    Tensor x = randn(shape, &gen);
    x.data<float>()[1] = std::nanf("");  // NaN passes BatchNorm and the ReLU
    std::vector<std::vector<ModulePtr>> stacks{{bn}, {bn, std::make_shared<ReLU>()}};
    if (shape.size() == 4) stacks.push_back({bn, std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2)});
    for (const auto& layers : stacks) {
      INFO(layers.size() << " layer(s)");
      Sequential seq(layers);
      const Tensor formula = seq(Variable(x)).data();  // gradients on: the separate ops
      Variable fused;
      {
        autograd::NoGradGuard no_grad;
        fused = seq(Variable(x));
      }
      REQUIRE(fused.grad_fn_name().empty());  // nothing recorded
      close(fused.data(), formula);
    }
  }
  // The running statistics are not touched, and errors still name the layer.
  auto bn = trained(3, 4);
  const Tensor rm = bn->running_mean.clone();
  autograd::NoGradGuard no_grad;
  (*bn)(Variable(randn({2, 3, 4, 4}, &gen)));
  REQUIRE(max(abs(bn->running_mean - rm)).item() == 0);
  REQUIRE_THROWS_WITH((*bn)(Variable(zeros({2, 4, 2, 2}))), Catch::Contains("[BatchNorm] expects input with 4 dims"));
}
