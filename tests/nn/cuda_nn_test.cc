// Layers, losses and optimizers on the GPU against the same model on the CPU: outputs,
// every parameter's gradient, and the parameters after several optimizer steps. Fresh
// random inputs every run, device memory poisoned (tests/testing/gpu.h). Without a GPU
// each case says it was skipped and why.
#include "catch2/catch.hpp"
#include "nn/adam.h"
#include "nn/autocast.h"
#include "nn/batchnorm.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cuda/runtime.h"
#include "tests/testing/gpu.h"

using namespace engine;
using namespace engine::nn;
using testing::max_abs_error;
using testing::rel_error;

namespace {
const Device kGpu = Device::cuda(0);

// Every parameter's gradient of `gpu_model` against `cpu_model`'s, within `bound`.
void check_grads(Module& gpu_model, Module& cpu_model, double bound) {
  auto pg = gpu_model.named_parameters(), pc = cpu_model.named_parameters();
  REQUIRE(pg.size() == pc.size());
  for (size_t i = 0; i < pg.size(); ++i) {
    INFO("gradient of " << pc[i].first);
    REQUIRE(pg[i].second.grad().device() == kGpu);
    CHECK(rel_error(pg[i].second.grad(), pc[i].second.grad()) <= bound);
  }
}
void check_params(Module& gpu_model, Module& cpu_model, double bound) {
  auto pg = gpu_model.named_parameters(), pc = cpu_model.named_parameters();
  for (size_t i = 0; i < pg.size(); ++i) {
    INFO("parameter " << pc[i].first);
    CHECK(rel_error(pg[i].second.data(), pc[i].second.data()) <= bound);
  }
}
}  // namespace

// conv -> relu -> flatten -> linear, as a CNN's first and last layers.
Variable conv_then_linear(Conv2d& conv, Linear& fc, const Variable& x) {
  const Variable h = autograd::relu(conv(x));
  return fc(autograd::reshape(h, {h.shape()[0], -1}));
}

TEST_CASE("cross-entropy and log-softmax on the GPU: loss and gradient match the CPU") {
  if (!testing::gpu_or_skip("cross-entropy on the GPU")) return;
  Generator g = testing::fresh_generator();
  for (auto [n, c] : std::vector<std::pair<int64_t, int64_t>>{{64, 10}, {7, 1000}, {1, 3}}) {
    INFO("n " << n << " c " << c);
    const Tensor x = randn({n, c}, &g) * 4.0, t = randint(0, c, {n}, &g);
    Variable xc(x, true), xg(x.to(kGpu), true);
    Variable lc = cross_entropy(xc, t), lg = cross_entropy(xg, t.to(kGpu));
    // A loss near 0 (the target's logit far above the rest) has few correct float32
    // digits on the CPU reference's side too: relative 1e-5, or 1e-6 absolute.
    CHECK(lg.data().item() == Approx(lc.data().item()).epsilon(1e-5).margin(1e-6));
    (lc * 3.0).backward();
    (lg * 3.0).backward();
    CHECK((rel_error(xg.grad(), xc.grad()) <= 1e-5 || max_abs_error(xg.grad(), xc.grad()) <= 1e-6));
    Variable sc(x, true), sg(x.to(kGpu), true);
    Variable oc = log_softmax(sc), og = log_softmax(sg);
    CHECK(rel_error(og.data(), oc.data()) <= 1e-5);
    autograd::sum(oc * Variable(x)).backward();
    autograd::sum(og * Variable(x.to(kGpu))).backward();
    CHECK(rel_error(sg.grad(), sc.grad()) <= 1e-5);
  }
  // Rows whose target is -100 (PyTorch's ignore_index) are left out on both devices.
  const Tensor x = randn({6, 10}, &g), t = from_vector(std::vector<int64_t>{1, -100, 3, -100, 9, 0});
  Variable xc(x, true), xg(x.to(kGpu), true);
  Variable lc = cross_entropy(xc, t), lg = cross_entropy(xg, t.to(kGpu));
  CHECK(lg.data().item() == Approx(lc.data().item()).epsilon(1e-5));
  lc.backward(), lg.backward();
  CHECK(rel_error(xg.grad(), xc.grad()) <= 1e-5);
  CHECK(max_abs_error(xg.grad().narrow(0, 1, 1), zeros({1, 10}).to(kGpu)) == 0);
  // A target out of range is named, as on the CPU.
  const Tensor bad = from_vector(std::vector<int64_t>{1, 12, 3});
  CHECK_THROWS_WITH(cross_entropy(Variable(randn({3, 10}, &g).to(kGpu)), bad.to(kGpu)),
                    Catch::Contains("target 12 at index 1"));
}

TEST_CASE("conv2d, max_pool2d, batch norm and dropout on the GPU match the CPU") {
  if (!testing::gpu_or_skip("conv layers on the GPU")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({4, 3, 13, 11}, &g);
  for (auto [k, s, p] : std::vector<std::array<int64_t, 3>>{{3, 1, 1}, {5, 2, 2}, {2, 2, 0}, {3, 3, 0}}) {
    INFO("kernel " << k << " stride " << s << " padding " << p);
    Generator init(11);
    Conv2d cpu_conv(3, 8, k, s, p, true, &init);
    Generator init2(11);
    Conv2d gpu_conv(3, 8, k, s, p, true, &init2);
    gpu_conv.to(kGpu);
    Variable xc(x, true), xg(x.to(kGpu), true);
    Variable yc = cpu_conv(xc), yg = gpu_conv(xg);
    CHECK(rel_error(yg.data(), yc.data()) <= 1e-5);
    Variable pc = max_pool2d(yc, k, s, p / 2), pg = max_pool2d(yg, k, s, p / 2);
    CHECK(rel_error(pg.data(), pc.data()) <= 1e-5);
    const Tensor w = randn(pc.shape(), &g);
    autograd::sum(pc * Variable(w)).backward();
    autograd::sum(pg * Variable(w.to(kGpu))).backward();
    CHECK(rel_error(xg.grad(), xc.grad()) <= 1e-5);
    check_grads(gpu_conv, cpu_conv, 1e-5);
  }
  BatchNorm2d bn_cpu(3), bn_gpu(3);
  bn_gpu.to(kGpu);
  Variable xc(x * 2.0 + 1.0, true), xg((x * 2.0 + 1.0).to(kGpu), true);
  Variable yc = bn_cpu(xc), yg = bn_gpu(xg);
  CHECK(rel_error(yg.data(), yc.data()) <= 1e-5);
  const Tensor w = randn(x.shape(), &g);
  autograd::sum(yc * Variable(w)).backward();
  autograd::sum(yg * Variable(w.to(kGpu))).backward();
  CHECK(rel_error(xg.grad(), xc.grad()) <= 1e-4);
  check_grads(bn_gpu, bn_cpu, 1e-5);
  CHECK(rel_error(bn_gpu.running_var, bn_cpu.running_var) <= 1e-5);
  // Dropout keeps about 1-p of the elements, each scaled by 1/(1-p).
  const Tensor ones_gpu = ones({1 << 20}, DType::Float32, kGpu);
  const Tensor d = dropout(Variable(ones_gpu), 0.25, true, &g).data();
  CHECK(std::fabs(mean(gt(d, scalar_tensor(0.0))).item() - 0.75) < 3e-3);
  CHECK(max(d).item() == Approx(1 / 0.75));
}

TEST_CASE("the GPU convolution's implicit GEMM matches the CPU across its tiles, with and without a bias") {
  if (!testing::gpu_or_skip("the implicit-GEMM convolution")) return;
  Generator g = testing::fresh_generator();
  // 70 output channels: two blocks of 64 along the channels; 20 x 3 x 3 = 180 window
  // inputs: 12 slices of 16, the last one partial; 3 x 9 x 10 = 270 pixels: 3 blocks of 128.
  const Tensor x = randn({3, 20, 9, 10}, &g);
  for (bool with_bias : {true, false}) {
    INFO("bias " << with_bias);
    Generator init(5), init2(5);
    Conv2d cpu_conv(20, 70, 3, 1, 1, with_bias, &init), gpu_conv(20, 70, 3, 1, 1, with_bias, &init2);
    gpu_conv.to(kGpu);
    Variable xc(x, true), xg(x.to(kGpu), true);
    Variable yc = cpu_conv(xc), yg = gpu_conv(xg);
    REQUIRE(yg.shape() == yc.shape());
    CHECK(rel_error(yg.data(), yc.data()) <= 1e-5);
    const Tensor w = randn(yc.shape(), &g);
    autograd::sum(yc * Variable(w)).backward();
    autograd::sum(yg * Variable(w.to(kGpu))).backward();
    CHECK(rel_error(xg.grad(), xc.grad()) <= 1e-5);
    check_grads(gpu_conv, cpu_conv, 1e-5);
  }
}

TEST_CASE("autocast on the GPU: conv2d and linear multiply in 16 bits on cuBLAS, as the CPU does") {
  if (!testing::gpu_or_skip("autocast on the GPU")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({4, 3, 10, 10}, &g);
  for (DType h : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(h));
    Generator i1(21), i2(21);
    Conv2d cpu_conv(3, 6, 3, 1, 1, true, &i1), gpu_conv(3, 6, 3, 1, 1, true, &i2);
    Linear cpu_fc(600, 10, true, &i1), gpu_fc(600, 10, true, &i2);
    gpu_conv.to(kGpu), gpu_fc.to(kGpu);
    Variable yc, yg;
    {
      Autocast ac(h);
      yc = conv_then_linear(cpu_conv, cpu_fc, Variable(x));
      yg = conv_then_linear(gpu_conv, gpu_fc, Variable(x.to(kGpu)));
    }
    REQUIRE(yg.data().dtype() == h);
    REQUIRE(yg.data().device() == kGpu);
    // Both sum the same 16-bit products in float32 (in another order) and round once.
    CHECK(rel_error(yg.data(), yc.data()) <= 1e-2);
    autograd::sum(yc).backward();
    autograd::sum(yg).backward();
    for (Module* m : {static_cast<Module*>(&gpu_conv), static_cast<Module*>(&gpu_fc)})
      for (const auto& [name, p] : m->named_parameters()) {
        INFO(name);
        CHECK(p.grad().dtype() == DType::Float32);  // master weights get float32 gradients
      }
    check_grads(gpu_conv, cpu_conv, 1e-2);
    check_grads(gpu_fc, cpu_fc, 1e-2);
  }
}

TEST_CASE("SGD (momentum, Nesterov, weight decay) and Adam/AdamW steps on the GPU match the CPU") {
  if (!testing::gpu_or_skip("fused optimizer kernels")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({32, 20}, &g), t = randint(0, 5, {32}, &g);
  for (int which = 0; which < 4; ++which) {
    INFO("optimizer " << which);
    auto make = [] {
      Generator init(3);
      return Sequential({std::make_shared<Linear>(20, 16, true, &init), std::make_shared<ReLU>(),
                         std::make_shared<Linear>(16, 5, true, &init)});
    };
    Sequential cpu = make(), gpu = make();
    gpu.to(kGpu);
    auto optimizer = [&](Module& m) -> std::unique_ptr<Optimizer> {
      if (which == 0) return std::make_unique<SGD>(m.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
      if (which == 1)
        return std::make_unique<SGD>(m.parameters(),
                                     SGDOptions{.lr = 0.1, .momentum = 0.9, .weight_decay = 0.01, .nesterov = true});
      if (which == 2) return std::make_unique<Adam>(m.parameters(), AdamOptions{.lr = 0.01, .weight_decay = 0.01});
      return std::make_unique<AdamW>(m.parameters(), AdamOptions{.lr = 0.01, .weight_decay = 0.1});
    };
    auto oc = optimizer(cpu), og = optimizer(gpu);
    for (int step = 0; step < 5; ++step) {
      oc->zero_grad(), og->zero_grad();
      cross_entropy(cpu(Variable(x)), t).backward();
      cross_entropy(gpu(Variable(x.to(kGpu))), t.to(kGpu)).backward();
      if (step == 0) check_grads(gpu, cpu, 1e-5);
      oc->step(), og->step();
    }
    check_params(gpu, cpu, 1e-5);
  }
}

TEST_CASE("an MLP trained on the GPU follows the same losses as on the CPU") {
  if (!testing::gpu_or_skip("MLP training on the GPU")) return;
  Generator g = testing::fresh_generator();
  auto make = [] {
    Generator init(5);
    return Sequential({std::make_shared<Linear>(784, 256, true, &init), std::make_shared<ReLU>(),
                       std::make_shared<Linear>(256, 10, true, &init)});
  };
  Sequential cpu = make(), gpu = make();
  gpu.to(kGpu);
  SGD oc(cpu.parameters(), {.lr = 0.05, .momentum = 0.9}), og(gpu.parameters(), {.lr = 0.05, .momentum = 0.9});
  const Tensor x = randn({64, 784}, &g), t = randint(0, 10, {64}, &g);
  const Tensor xg = x.to(kGpu), tg = t.to(kGpu);
  double first = 0, last = 0;
  for (int step = 0; step < 30; ++step) {
    oc.zero_grad(), og.zero_grad();
    Variable lc = cross_entropy(cpu(Variable(x)), t), lg = cross_entropy(gpu(Variable(xg)), tg);
    INFO("step " << step);
    // Relative 1e-4, or 1e-6 absolute once the loss nears 0 (it memorises the batch, and
    // lse - x[target] then cancels to a few float32 ulps of the logits).
    CHECK(lg.data().item() == Approx(lc.data().item()).epsilon(1e-4).margin(1e-6));
    lc.backward(), lg.backward();
    oc.step(), og.step();
    if (step == 0) first = lg.data().item();
    last = lg.data().item();
  }
  CHECK(last < first * 0.5);  // it learned (the batch is memorised)
  check_params(gpu, cpu, 1e-4);
}

TEST_CASE("a training step captured as a CUDA graph and replayed trains exactly as eager steps do") {
  if (!testing::gpu_or_skip("CUDA graphs")) return;
  auto make = [] {
    Generator init(12);
    auto m = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(784, 64, true, &init),
                                                                 std::make_shared<ReLU>(),
                                                                 std::make_shared<Linear>(64, 10, true, &init)});
    m->to(kGpu);
    return m;
  };
  auto eager = make(), graphed = make();
  SGD opt_eager(eager->parameters(), {.lr = 0.05, .momentum = 0.9});
  SGD opt_graphed(graphed->parameters(), {.lr = 0.05, .momentum = 0.9});
  Generator g(3);
  Tensor x = randn({32, 784}, &g).to(kGpu), y = randint(0, 10, {32}, &g).to(kGpu);  // the graph's inputs
  auto step = [&](Module& m, SGD& opt) {
    opt.zero_grad();
    Variable loss = cross_entropy(m(Variable(x)), y);
    loss.backward();
    opt.step();
    return loss;
  };
  for (int i = 0; i < 3; ++i) step(*eager, opt_eager), step(*graphed, opt_graphed);  // momentum buffers made
  cuda::Graph graph(0);
  graph.capture_begin();
  const Variable graphed_loss = step(*graphed, opt_graphed);  // recorded, not run
  graph.capture_end();
  CHECK(graph.nodes() > 0);
  check_params(*graphed, *eager, 0);  // the capture ran nothing
  // The capture took the cached blocks the eager steps had freed (they now belong to the
  // graph's pool), so the first eager step after it makes its own again; from then on
  // neither the eager steps nor the replays allocate.
  int64_t mallocs = 0;
  for (int i = 0; i < 10; ++i) {
    x.copy_(randn({32, 784}, &g)), y.copy_(randint(0, 10, {32}, &g));  // a new batch, into the same tensors
    const Variable eager_loss = step(*eager, opt_eager);
    graph.replay();
    INFO("replay " << i);
    CHECK(rel_error(graphed_loss.data(), eager_loss.data()) <= 1e-6);
    if (i == 0) mallocs = cuda::memory_stats(0).cuda_mallocs;
  }
  check_params(*graphed, *eager, 1e-6);
  CHECK(cuda::memory_stats(0).cuda_mallocs == mallocs);  // 9 more steps and replays, no cudaMalloc
}
