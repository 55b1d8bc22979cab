// Autocast and GradScaler: inside a scope linear and conv2d multiply in 16 bits and give
// 16-bit outputs, parameters and their gradients stay float32, the loss is float32, the
// result is close to float32 training; loss scaling rescues float16 gradients that would
// round to zero, skips steps whose gradients overflowed, and grows the scale back.
#include <cmath>

#include "catch2/catch.hpp"
#include "nn/autocast.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

namespace {
double relative_distance(const Tensor& a, const Tensor& b) {
  const Tensor d = a.to(DType::Float32) - b.to(DType::Float32);
  return std::sqrt(sum(d * d).item() / sum(b * b).item());
}
}  // namespace

TEST_CASE("autocast: linear multiplies in bfloat16; gradients come back float32") {
  Generator g(1);
  Variable x(randn({16, 32}, &g)), w(randn({8, 32}, &g), true), b(randn({8}, &g), true);
  Variable y;
  {
    Autocast ac(DType::BFloat16);
    REQUIRE(autocast_enabled());
    y = linear(x, w, b);
  }
  REQUIRE_FALSE(autocast_enabled());
  REQUIRE(y.data().dtype() == DType::BFloat16);
  // The product of the rounded operands with float32 sums, plus the rounded bias, rounded
  // once (as PyTorch's addmm): within one bfloat16 step (2^-7 relative) of that everywhere,
  // and equal to it but where the GEMM's order of sums tips a rounding (rare). Rounding
  // the product before adding the bias, then again, missed it at about a quarter of them.
  const auto r = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
  const Tensor xw = matmul(r(x.data()), r(w.data()).transpose(0, 1));
  const auto got = y.data().to(DType::Float32).to_vector<float>(), exp = r(xw + r(b.data())).to_vector<float>();
  size_t equal = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    REQUIRE(std::fabs(got[i] - exp[i]) <= std::fabs(exp[i]) * 0x1p-7f + 1e-6f);
    equal += got[i] == exp[i];
  }
  REQUIRE(equal >= got.size() * 97 / 100);
  sum(y).backward();  // sum's gradient is float32 ones; the cast turns it into bfloat16 for linear
  REQUIRE(w.grad().dtype() == DType::Float32);
  REQUIRE(b.grad().dtype() == DType::Float32);
  // dW = sum over rows of x (rounded to bfloat16): within bfloat16 precision of float32's.
  Variable w32(w.data(), true);
  sum(linear(x, w32, Variable())).backward();
  REQUIRE(relative_distance(w.grad(), w32.grad()) < 1e-2);
  // ...and exactly the float32 sums of the 16-bit operands (the gradient of y is 1, exact
  // in bfloat16): dW[o, i] = sum_m x16[m, i], never rounded to 8 bits on its way.
  const Tensor colsum = sum(r(x.data()), {0});
  const auto gw = w.grad().to_vector<float>(), cs = colsum.to_vector<float>();
  int unrounded = 0;
  for (int64_t o = 0; o < 8; ++o)
    for (int64_t i = 0; i < 32; ++i) {
      const float want = cs[size_t(i)], got_w = gw[size_t(o * 32 + i)];
      REQUIRE(std::fabs(got_w - want) <= std::fabs(want) * 1e-6f + 1e-6f);
      unrounded += float(bfloat16(want)) != want;
    }
  REQUIRE(unrounded > 0);  // the check could tell a rounded gradient apart
}

TEST_CASE("autocast: conv2d's input and weight gradients are the float32 sums of the 16-bit operands") {
  Generator g(2);
  const auto r = [](const Tensor& t) { return t.to(DType::BFloat16).to(DType::Float32); };
  // float32 input (the per-image path, in bfloat16 and in float16) and a bfloat16 input
  // (the whole-batch path, with a recorded cast).
  for (const auto& [input, scope] : {std::pair{DType::Float32, DType::BFloat16},
                                     {DType::BFloat16, DType::BFloat16},
                                     {DType::Float32, DType::Float16}}) {
    INFO("input " << dtype_name(input) << ", autocast " << dtype_name(scope));
    const DType half = scope;  // (a lambda may not capture a structured binding)
    const auto r16 = [half](const Tensor& t) { return t.to(half).to(DType::Float32); };
    // (only float32 tensors take gradients: a 16-bit input is an activation, not checked)
    Variable x(r(randn({2, 3, 9, 9}, &g)).to(input), input == DType::Float32), w(randn({4, 3, 3, 3}, &g), true),
        b(randn({4}, &g), true);
    {
      Autocast ac(scope);
      Variable y = conv2d(x, w, b, 1, 1);
      REQUIRE(y.data().dtype() == scope);
      sum(y).backward();  // the output's gradient is 1: exact in 16 bits
    }
    REQUIRE(w.grad().dtype() == DType::Float32);
    REQUIRE(b.grad().dtype() == DType::Float32);
    // The same in float32 on the rounded operands: dW[o] = the sum of x16 over every window,
    // dx = the sum of w16 over the windows that hold each position.
    Variable x32(r16(x.data().to(DType::Float32)), true), w32(r16(w.data()), true);
    sum(conv2d(x32, w32, Variable(), 1, 1)).backward();
    const auto got = w.grad().to_vector<float>(), want = w32.grad().to_vector<float>();
    int unrounded = 0;
    for (size_t i = 0; i < got.size(); ++i) {
      REQUIRE(std::fabs(got[i] - want[i]) <= std::fabs(want[i]) * 1e-5f + 1e-5f);
      unrounded += float(bfloat16(want[i])) != want[i];
    }
    REQUIRE(unrounded > 0);
    REQUIRE(b.grad().to_vector<float>()[0] == 2 * 9 * 9);  // sum of the output's gradient, per channel
    // dx (float32 input, the per-image path): the float32 sums, never rounded to 16 bits.
    if (input != DType::Float32) continue;
    REQUIRE(x.grad().dtype() == DType::Float32);
    const auto gx = x.grad().to_vector<float>(), wx = x32.grad().to_vector<float>();
    for (size_t i = 0; i < gx.size(); ++i) REQUIRE(std::fabs(gx[i] - wx[i]) <= std::fabs(wx[i]) * 1e-5f + 1e-5f);
  }
}

TEST_CASE("linear and conv2d on 16-bit tensors add the bias before rounding: the float32 result rounded once") {
  // Outside autocast, on bfloat16 and float16 tensors (conv2d's whole-batch product): the
  // float32 computation on the same values, rounded once, where rounding the product and
  // then its sum with the bias missed it at a quarter of the outputs.
  Generator g(4);
  for (DType half : {DType::BFloat16, DType::Float16}) {
    const Tensor x = (randn({2, 3, 9, 9}, &g) * 4.0).to(half), w = (randn({5, 3, 3, 3}, &g)).to(half);
    const Tensor b = (randn({5}, &g) * 4.0).to(half), xl = (randn({16, 40}, &g) * 4.0).to(half);
    const Tensor wl = randn({24, 40}, &g).to(half), bl = (randn({24}, &g) * 4.0).to(half);
    const auto f32 = [](const Tensor& t) { return Variable(t.to(DType::Float32)); };
    const std::pair<Tensor, Tensor> cases[] = {
        {conv2d(Variable(x), Variable(w), Variable(b), 1, 1).data(), conv2d(f32(x), f32(w), f32(b), 1, 1).data()},
        {linear(Variable(xl), Variable(wl), Variable(bl)).data(), linear(f32(xl), f32(wl), f32(bl)).data()}};
    for (const auto& [got16, reference] : cases) {
      REQUIRE(got16.dtype() == half);
      const auto got = got16.to(DType::Float32).to_vector<float>();
      const auto exp = reference.to(half).to(DType::Float32).to_vector<float>();
      size_t equal = 0;
      for (size_t i = 0; i < got.size(); ++i) {
        REQUIRE(std::fabs(got[i] - exp[i]) <= std::fabs(exp[i]) * 0x1p-7f + 1e-6f);
        equal += got[i] == exp[i];
      }
      REQUIRE(equal >= got.size() * 97 / 100);  // all but where an order of sums tips a rounding
    }
  }
}

TEST_CASE("autocast: conv2d's errors name what is wrong, as without autocast") {
  Generator g(6);
  Autocast ac(DType::BFloat16);
  Variable w(randn({4, 3, 3, 3}, &g), true);
  REQUIRE_THROWS_WITH(conv2d(Variable(randn({2, 2, 9, 9}, &g)), w, Variable(), 1, 1),
                      Catch::Contains("[conv2d] input has 2 channels but the weight expects 3"));
  REQUIRE_THROWS_WITH(conv2d(Variable(randn({2, 3, 9, 9}, &g)), Variable(randn({4, 3, 3}, &g), true), Variable(), 1, 1),
                      Catch::Contains("[conv2d] weight must be (O, C, kh, kw), got (4,3,3)"));
}

TEST_CASE("a 16-bit output meets a float32 tensor in float32, and each gets its gradient in its own dtype") {
  // y = linear(x) under autocast is bfloat16; y + r (r float32) and y * r are float32 as in
  // PyTorch, where they were an error "dtypes differ".
  Generator g(6);
  Variable x(randn({4, 8}, &g)), w(randn({3, 8}, &g), true), r(randn({4, 3}, &g), true);
  Variable y;
  {
    Autocast ac(DType::BFloat16);
    y = linear(x, w, Variable());
  }
  REQUIRE(y.data().dtype() == DType::BFloat16);
  const Variable z = add(mul(y, r), r);
  REQUIRE(z.data().dtype() == DType::Float32);
  sum(z).backward();
  REQUIRE(w.grad().dtype() == DType::Float32);
  REQUIRE(r.grad().dtype() == DType::Float32);
  // dz/dr = y + 1 (y's bfloat16 values, widened); dz/dw = r^T x through the 16-bit product.
  const Tensor y32 = y.data().to(DType::Float32);
  REQUIRE(r.grad().to_vector<float>() == (y32 + 1.0).to_vector<float>());
  const Tensor dw = matmul(r.data().transpose(0, 1), x.data());
  REQUIRE(relative_distance(w.grad(), dw) < 1e-2);  // r and x rounded to bfloat16 on the way
}

TEST_CASE("autocast scopes nest and can be disabled") {
  {
    Autocast outer(DType::Float16);
    {
      Autocast inner(DType::BFloat16, false);
      REQUIRE_FALSE(autocast_enabled());
    }
    REQUIRE(autocast_enabled());
    REQUIRE(autocast_dtype() == DType::Float16);
  }
  REQUIRE_FALSE(autocast_enabled());
  REQUIRE_THROWS_WITH(Autocast(DType::Int64), Catch::Contains("bfloat16 or float16, got int64"));
}

TEST_CASE("an MLP and a CNN under autocast: float32 loss, gradients close to float32's") {
  Generator g(2);
  auto mlp = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(64, 128, true, &g),
                                                                 std::make_shared<ReLU>(),
                                                                 std::make_shared<Linear>(128, 10, true, &g)});
  auto cnn = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(1, 8, 3, 1, 1, true, &g), std::make_shared<BatchNorm2d>(8), std::make_shared<ReLU>(),
      std::make_shared<MaxPool2d>(2), std::make_shared<Flatten>(), std::make_shared<Linear>(8 * 4 * 4, 10, true, &g)});
  const Tensor xm = randn({32, 64}, &g), xc = randn({32, 1, 8, 8}, &g), y = randint(0, 10, {32}, &g);
  for (auto [model, x] : {std::pair{std::static_pointer_cast<Module>(mlp), xm}, {cnn, xc}}) {
    model->zero_grad();
    cross_entropy((*model)(Variable(x)), y).backward();
    std::vector<Tensor> full;
    for (auto& p : model->parameters()) full.push_back(p.grad().clone());
    model->zero_grad();
    Variable loss;
    {
      Autocast ac(DType::BFloat16);
      loss = cross_entropy((*model)(Variable(x)), y);
    }
    REQUIRE(loss.data().dtype() == DType::Float32);
    loss.backward();
    const auto params = model->parameters();
    const auto names = model->named_parameters();
    double largest = 0;
    for (const Tensor& f : full) largest = std::max(largest, std::sqrt(sum(f * f).item()));
    for (size_t i = 0; i < params.size(); ++i) {
      const double norm = std::sqrt(sum(full[i] * full[i]).item());
      INFO(names[i].first << ": " << relative_distance(params[i].grad(), full[i]) << " (norm " << norm << ")");
      REQUIRE(params[i].grad().dtype() == DType::Float32);
      if (norm < 1e-4 * largest) {
        // A convolution's bias before BatchNorm: exactly 0 in exact arithmetic (the
        // normalisation subtracts the mean), so only rounding is left, on either side.
        const Tensor& got = params[i].grad();
        REQUIRE(std::sqrt(sum(got * got).item()) < 1e-2 * largest);
        continue;
      }
      // Each value in 16 bits is off by up to 2^-9 (bfloat16's 8 significant bits), and a
      // gradient sums 32 rows of mixed-sign terms, which cancel and magnify that: measured
      // up to 5.6% here (the first layer's weight), so 10% bounds it.
      REQUIRE(relative_distance(params[i].grad(), full[i]) < 0.1);
    }
  }
}

TEST_CASE("GradScaler: float16 gradients that round to zero without it are right with it") {
  // A loss scaled down by 1e-7: its gradients (~1e-9) are below float16's smallest
  // subnormal (6e-8), so under float16 autocast they vanish on their way into the layer.
  Generator g(3);
  const Tensor x = randn({16, 8}, &g), y = randint(0, 4, {16}, &g);
  const Tensor w0 = randn({4, 8}, &g);
  auto grad_of = [&](bool autocast, GradScaler* scaler) {
    Variable w(w0.clone(), true);
    Variable loss;
    {
      Autocast ac(DType::Float16, autocast);
      loss = cross_entropy(linear(Variable(x), w, Variable()), y) * 1e-7;
    }
    (scaler ? scaler->scale(loss) : loss).backward();
    if (scaler) {
      SGD opt({w}, {.lr = 0});
      scaler->unscale_(opt);
    }
    return w.grad();
  };
  const Tensor exact = grad_of(false, nullptr);
  REQUIRE(max(abs(grad_of(true, nullptr))).item() == 0);  // every gradient lost
  GradScaler scaler;
  const Tensor scaled = grad_of(true, &scaler);
  REQUIRE(relative_distance(scaled, exact) < 1e-2);
}

TEST_CASE("GradScaler: an overflowed step is skipped and the scale backs off; good steps grow it") {
  Generator g(4);
  Variable w(randn({4, 8}, &g), true);
  SGD opt({w}, {.lr = 0.1});
  GradScaler scaler({.init_scale = std::ldexp(1.0, 100), .growth_interval = 3});  // 1.3e30, a float32
  const Tensor before = w.data().clone();
  const Tensor x = randn({16, 8}, &g), y = randint(0, 4, {16}, &g);
  auto one_step = [&] {
    opt.zero_grad();
    Variable loss;
    {
      Autocast ac(DType::Float16);
      loss = cross_entropy(linear(Variable(x), w, Variable()), y);
    }
    scaler.scale(loss).backward();  // 2^100 overflows float16 on the way back: Inf gradients
    const bool stepped = scaler.step(opt);
    scaler.update();
    return stepped;
  };
  REQUIRE_FALSE(one_step());
  REQUIRE(scaler.get_scale() == std::ldexp(1.0, 99));
  REQUIRE(relative_distance(w.data(), before) == 0);  // skipped: the weights did not move
  int skipped = 1;
  while (!one_step()) ++skipped;  // halves until the gradients fit in float16
  REQUIRE(scaler.get_scale() == std::ldexp(1.0, 100 - skipped));
  REQUIRE(relative_distance(w.data(), before) > 0);
  const double fit = scaler.get_scale();
  REQUIRE(one_step());
  REQUIRE(one_step());  // the third good step in a row
  REQUIRE(scaler.get_scale() == fit * 2);
  REQUIRE(scaler.skipped_steps() == skipped);
  REQUIRE_THROWS_WITH(GradScaler({.backoff_factor = 1}), Catch::Contains("backoff_factor must be in (0, 1)"));
  REQUIRE_THROWS_WITH(GradScaler({.growth_factor = INFINITY}),
                      Catch::Contains("growth_factor must exceed 1 and be finite"));
  REQUIRE_THROWS_WITH(GradScaler({.init_scale = NAN}), Catch::Contains("init_scale must be positive and finite"));
  REQUIRE_THROWS_WITH(GradScaler({.init_scale = 1e39}), Catch::Contains("positive and finite in float32"));

  // Its state, for checkpoints: the scale and the good steps counted towards the next growth.
  const StateDict state = scaler.state_dict();
  REQUIRE(state.at("scale").item() == fit * 2);
  REQUIRE(state.at("growth_tracker").item() == 0);
  StateDict two_good = state;
  two_good["growth_tracker"] = full({}, 2, DType::Int64);
  GradScaler resumed({.growth_interval = 3});
  resumed.load_state_dict(two_good);
  REQUIRE(resumed.get_scale() == fit * 2);
  REQUIRE(resumed.state_dict().at("growth_tracker").item() == 2);
  const auto refused = [&](const char* key, double value, const std::string& why) {
    StateDict bad = scaler.state_dict();
    bad[key] = full({}, value, bad.at(key).dtype());
    REQUIRE_THROWS_WITH(resumed.load_state_dict(bad), Catch::Contains(why));
    REQUIRE(resumed.get_scale() == fit * 2);  // unchanged
  };
  refused("scale", NAN, "\"scale\" must be positive and finite, got nan");
  refused("scale", 0, "\"scale\" must be positive");
  refused("growth_tracker", 3, "\"growth_tracker\" must be a whole number in [0, 3), got 3");
  REQUIRE_THROWS_WITH(resumed.load_state_dict({}), Catch::Contains("saved from a disabled GradScaler"));
  REQUIRE(GradScaler({.enabled = false}).state_dict().empty());
}
