// GPU benchmarks, the same workloads as bench/gpu_bench.py runs in PyTorch, printed as
// the same JSON lines so bench/gpu_report.py can set them side by side:
//   - memory-bound kernels (copy, add, relu, scale in place, sum) in GB/s, counting each
//     byte read and written once, as a fraction of the device-to-device copy's rate;
//   - the tiled teaching GEMM against cuBLAS, in TFLOP/s;
//   - one training step (forward, backward, SGD momentum) of an MLP, of a small CNN and of
//     the MLP under DDP over nccl at world size 1, with the cudaMalloc calls the timed
//     steps made (0 after warm-up).
// All times: CUDA events around many repetitions, median of several rounds.
//
//   gpu_bench [--quick]      (prints "SKIPPED ..." and exits 0 without a GPU)
#include <cstdio>
#include <cstring>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "bench/median.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "nn/autocast.h"
#include "nn/conv.h"
#include "nn/functional.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

namespace {
const Device kGpu = Device::cuda(0);

// Milliseconds per call of f: `reps` calls between two events, median of `rounds`.
double time_ms(const std::function<void()>& f, int reps, int rounds = 7) {
  for (int i = 0; i < 3; ++i) f();  // warm-up: module load, handles, the allocator's cache
  cuda::Stream s = cuda::current_stream(0);
  std::vector<double> ms;
  for (int r = 0; r < rounds; ++r) {
    cuda::Event start(0, true), stop(0, true);
    start.record(s);
    for (int i = 0; i < reps; ++i) f();
    stop.record(s);
    stop.synchronize();
    ms.push_back(stop.elapsed_ms(start) / reps);
  }
  return median(ms);
}

void bandwidth(int64_t n) {
  Generator g(1);
  const Tensor a = randn({n}, &g, kGpu), b = randn({n}, &g, kGpu);
  Tensor out = empty({n}, DType::Float32, kGpu), inplace = randn({n}, &g, kGpu);
  const double bytes = double(n) * 4;
  const double copy_ms = time_ms([&] { cuda::copy_device_to_device(out.bytes(), a.bytes(), a.nbytes(), 0); }, 20);
  const double copy_gbs = 2 * bytes / copy_ms / 1e6;
  struct K {
    const char* name;
    double traffic;  // bytes moved, in units of one tensor
    std::function<void()> f;
  };
  const std::vector<K> kernels = {
      {"copy", 2, [&] { cuda::copy_device_to_device(out.bytes(), a.bytes(), a.nbytes(), 0); }},
      {"add", 3, [&] { (void)add(a, b); }},
      {"relu", 2, [&] { (void)relu(a); }},
      {"mul_", 2, [&] { mul_(inplace, 1.0000001); }},
      {"sum", 1, [&] { (void)sum(a); }},
  };
  for (const K& k : kernels) {
    const double ms = time_ms(k.f, 20);
    const double gbs = k.traffic * bytes / ms / 1e6;
    std::printf(
        "{\"impl\": \"engine\", \"bench\": \"bandwidth\", \"kernel\": \"%s\", \"numel\": %lld, \"ms\": %.4f, "
        "\"GBps\": %.1f, \"of_copy\": %.3f}\n",
        k.name, (long long)n, ms, gbs, gbs / copy_gbs);
  }
}

void gemm(int64_t n) {
  Generator g(2);
  const Tensor a = randn({n, n}, &g, kGpu), b = randn({n, n}, &g, kGpu);
  Tensor c = empty({n, n}, DType::Float32, kGpu);
  const double flops = 2.0 * double(n) * n * n;
  const double tiled =
      time_ms([&] { cuda::tiled_gemm(0, n, n, n, a.data<float>(), b.data<float>(), c.data<float>()); }, 5);
  const double blas = time_ms([&] { (void)matmul(a, b); }, 5);
  std::printf(
      "{\"impl\": \"engine\", \"bench\": \"gemm\", \"n\": %lld, \"tiled_tflops\": %.2f, \"cublas_tflops\": %.2f}\n",
      (long long)n, flops / tiled / 1e9, flops / blas / 1e9);
  // The same product in each 16-bit type on the tensor cores (float32 sums, rounded once).
  for (DType h : {DType::BFloat16, DType::Float16}) {
    const Tensor ah = a.to(h), bh = b.to(h);
    const double ms = time_ms([&] { (void)matmul(ah, bh); }, 5);
    std::printf("{\"impl\": \"engine\", \"bench\": \"gemm16\", \"dtype\": \"%s\", \"n\": %lld, \"tflops\": %.2f}\n",
                dtype_name(h), (long long)n, flops / ms / 1e9);
  }
}

std::shared_ptr<Module> make_model(const std::string& name) {
  if (name == "mlp")
    return std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
        std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Conv2d>(1, 32, 3, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Conv2d>(32, 64, 3, 1, 1), std::make_shared<ReLU>(), std::make_shared<MaxPool2d>(2),
      std::make_shared<Flatten>(), std::make_shared<Linear>(64 * 7 * 7, 128), std::make_shared<ReLU>(),
      std::make_shared<Linear>(128, 10)});
}

// name "mlp-ddp": the MLP wrapped in DDP over nccl at world size 1 with its buckets
// all-reduced anyway (reduce_when_alone), as PyTorch's DDP does: DDP's own cost on a GPU.
// autocast bfloat16: the forward and the loss inside nn::Autocast, as torch.autocast.
// graph: the step captured once as a CUDA graph (runtime.h) and replayed, one launch per
// step instead of one per kernel; a capture that fails is reported, and the rows go on.
void train_step(const std::string& name, int64_t batch, int steps, bool autocast = false, bool graph = false) {
  manual_seed(0);
  cuda::reset_peak_memory(0);
  const bool ddp = name == "mlp-ddp";
  std::shared_ptr<Module> model = make_model(ddp ? "mlp" : name);
  model->to(kGpu);
  if (ddp) {
    setenv("RANK", "0", 1), setenv("WORLD_SIZE", "1", 1), setenv("LOCAL_RANK", "0", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1), setenv("MASTER_PORT", "0", 1);
    dist::init_process_group("nccl");
    dist::DDPOptions options;
    options.reduce_when_alone = true;
    model = std::make_shared<dist::DistributedDataParallel>(model, options);
  }
  SGD opt(model->parameters(), {.lr = 0.01, .momentum = 0.9});
  Generator g(3);
  const Shape xs = name == "cnn" ? Shape{batch, 1, 28, 28} : Shape{batch, 784};
  const Tensor x = randn(xs, &g, kGpu), y = randint(0, 10, {batch}, &g).to(kGpu);
  auto step = [&] {
    opt.zero_grad();
    Variable loss;
    {
      nn::Autocast scope(DType::BFloat16, autocast);
      loss = cross_entropy((*model)(Variable(x)), y);
    }
    loss.backward();
    opt.step();
  };
  for (int i = 0; i < 10; ++i) step();
  std::optional<cuda::Graph> captured;
  std::function<void()> timed = step;
  if (graph) {
    try {
      captured.emplace(0);
      captured->capture_begin();
      step();
      captured->capture_end();
      timed = [&] { captured->replay(); };
    } catch (const std::exception& e) {
      std::string why = e.what();  // as a JSON string: no quotes, backslashes or line breaks
      for (char& ch : why)
        if (ch == '"' || ch == '\\' || ch == '\n') ch = '\'';
      std::printf(
          "{\"impl\": \"engine\", \"bench\": \"train_step_graph_error\", \"model\": \"%s\", \"error\": \"%s\"}\n",
          name.c_str(), why.c_str());
      return;
    }
  }
  const int64_t mallocs = cuda::memory_stats(0).cuda_mallocs;
  const double ms = time_ms(timed, steps, 5);
  const cuda::MemoryStats m = cuda::memory_stats(0);
  std::printf(
      "{\"impl\": \"engine\", \"bench\": \"train_step\", \"model\": \"%s\", \"autocast\": \"%s\", \"graph\": %s, "
      "\"batch\": %lld, \"step_ms\": %.4f, \"mallocs_in_timed_steps\": %lld, \"peak_allocated_mb\": %.1f, "
      "\"cached_mb\": %.1f}\n",
      name.c_str(), autocast ? "bf16" : "off", graph ? "true" : "false", (long long)batch, ms,
      (long long)(m.cuda_mallocs - mallocs), m.peak_allocated / 1048576.0, m.cached / 1048576.0);
  captured.reset();  // its pool back to the cache before the model goes
  if (ddp) {
    model.reset();  // DDP before its group
    dist::destroy_process_group();
  }
}

// One convolution layer alone (forward, then forward + backward), to see where a CNN
// step's time goes: the two layers of the benchmark CNN at batch 256.
void conv_layer(int64_t batch, int64_t in, int64_t out, int64_t size) {
  Generator g(4);
  Conv2d conv(in, out, 3, 1, 1);
  conv.to(kGpu);
  const Tensor x = randn({batch, in, size, size}, &g, kGpu);
  const double fwd = time_ms([&] { (void)conv(Variable(x)); }, 20);
  const double both = time_ms([&] { autograd::sum(conv(Variable(x, true))).backward(); }, 20);
  std::printf(
      "{\"impl\": \"engine\", \"bench\": \"conv_layer\", \"layer\": \"%lldx%lld@%lld\", \"batch\": %lld, "
      "\"forward_ms\": %.4f, \"forward_backward_ms\": %.4f}\n",
      (long long)in, (long long)out, (long long)size, (long long)batch, fwd, both);
}

// Where the CNN step's time goes (bench "cnn_part"): each layer of the benchmark CNN alone,
// forward and forward + backward (given the output's gradient, as backward() inside the
// step gets it), on inputs of the sizes the step gives it; then the second convolution's
// backward piece by piece, as nn/functional.cc runs it on a GPU.
void cnn_parts(int64_t batch) {
  Generator g(5);
  auto part = [&](const std::string& name, const std::function<void()>& f) {
    std::printf("{\"impl\": \"engine\", \"bench\": \"cnn_part\", \"batch\": %lld, \"part\": \"%s\", \"ms\": %.4f}\n",
                (long long)batch, name.c_str(), time_ms(f, 20));
  };
  // One layer: its forward alone, then forward + backward with the input's gradient when
  // `dx` (every layer but the first needs it).
  auto layer = [&](const std::string& name, const Tensor& x, bool dx,
                   const std::function<Variable(const Variable&)>& f) {
    const Tensor gy = randn(f(Variable(x)).shape(), &g, kGpu);
    part(name + " fwd", [&] { (void)f(Variable(x)); });
    part(name + " fwd+bwd", [&] { f(Variable(x, dx)).backward(gy); });
  };
  Conv2d c1(1, 32, 3, 1, 1), c2(32, 64, 3, 1, 1);
  Linear f1(64 * 7 * 7, 128), f2(128, 10);
  for (Module* m : std::initializer_list<Module*>{&c1, &c2, &f1, &f2}) m->to(kGpu);
  const Tensor x0 = randn({batch, 1, 28, 28}, &g, kGpu), a1 = randn({batch, 32, 28, 28}, &g, kGpu),
               p1 = randn({batch, 32, 14, 14}, &g, kGpu), a2 = randn({batch, 64, 14, 14}, &g, kGpu),
               p2 = randn({batch, 64 * 7 * 7}, &g, kGpu), h = randn({batch, 128}, &g, kGpu),
               z = randn({batch, 10}, &g, kGpu), y = randint(0, 10, {batch}, &g).to(kGpu);
  layer("conv1", x0, false, [&](const Variable& v) { return c1(v); });
  layer("relu1", a1, true, [](const Variable& v) { return autograd::relu(v); });
  layer("pool1", a1, true, [](const Variable& v) { return max_pool2d(v, 2, 2); });
  layer("conv2", p1, true, [&](const Variable& v) { return c2(v); });
  layer("relu2", a2, true, [](const Variable& v) { return autograd::relu(v); });
  layer("pool2", a2, true, [](const Variable& v) { return max_pool2d(v, 2, 2); });
  layer("fc1", p2, true, [&](const Variable& v) { return f1(v); });
  layer("fc2", h, true, [&](const Variable& v) { return f2(v); });
  part("cross_entropy fwd+bwd", [&] { cross_entropy(Variable(z, true), y).backward(); });
  std::vector<Variable> all;  // every layer's parameters, one optimizer, as in the step
  for (Module* m : std::initializer_list<Module*>{&c1, &c2, &f1, &f2})
    for (const Variable& p : m->parameters()) all.push_back(p);
  SGD opt(all, {.lr = 0.01, .momentum = 0.9});
  for (Variable& p : all) p.set_grad(randn(p.shape(), &g, kGpu));
  part("sgd step (all parameters)", [&] { opt.step(); });
  // conv2's backward, piece by piece (O = 64 outputs, C*kh*kw = 288 rows, L = N*14*14).
  const int64_t L = batch * 14 * 14;
  const Tensor gy = randn({batch, 64, 14, 14}, &g, kGpu), w2 = randn({64, 288}, &g, kGpu);
  const Tensor g2 = gy.permute({1, 0, 2, 3}).contiguous().reshape({64, L});
  const Tensor cols = im2col(p1, 3, 3, 1, 1, ColumnLayout::BatchInColumns);
  const Tensor dcols = matmul(w2.transpose(0, 1), g2);
  part("conv2 bwd: permute g", [&] { (void)gy.permute({1, 0, 2, 3}).contiguous(); });
  part("conv2 bwd: dcols = W^T g (288 x 64 x L)", [&] { (void)matmul(w2.transpose(0, 1), g2); });
  part("conv2 bwd: col2im", [&] { (void)col2im(dcols, p1.shape(), 3, 3, 1, 1, ColumnLayout::BatchInColumns); });
  part("conv2 bwd: im2col", [&] { (void)im2col(p1, 3, 3, 1, 1, ColumnLayout::BatchInColumns); });
  part("conv2 bwd: dW = g cols^T (64 x L x 288)", [&] { (void)matmul(g2, cols.transpose(0, 1)); });
  part("conv2 bwd: db = sum g", [&] { (void)sum(g2, {1}); });
  // dW as one product per image, summed (the inner dimension L cut into N pieces): cuBLAS's
  // choice for an output this small over so long an inner dimension is what is timed above.
  part("conv2 bwd: dW as N products, then their sum", [&] {
    (void)sum(
        matmul(g2.reshape({64, batch, 196}).permute({1, 0, 2}), cols.reshape({288, batch, 196}).permute({1, 2, 0})),
        {0});
  });
  // conv1's backward (no dx: the images need no gradient): the columns, then dW.
  const Tensor g1 = randn({32, batch * 784}, &g, kGpu), cols1 = im2col(x0, 3, 3, 1, 1, ColumnLayout::BatchInColumns);
  part("conv1 bwd: im2col", [&] { (void)im2col(x0, 3, 3, 1, 1, ColumnLayout::BatchInColumns); });
  part("conv1 bwd: dW = g cols^T (32 x L x 9)", [&] { (void)matmul(g1, cols1.transpose(0, 1)); });
  part("conv1 bwd: dW as N products, then their sum", [&] {
    (void)sum(
        matmul(g1.reshape({32, batch, 784}).permute({1, 0, 2}), cols1.reshape({9, batch, 784}).permute({1, 2, 0})),
        {0});
  });
  // fc2's backward: dx = g W, dW = g^T h, db = the sum of g's rows (a reduction down columns).
  const Tensor gz = randn({batch, 10}, &g, kGpu), w = randn({10, 128}, &g, kGpu);
  part("fc2 bwd: dx = g W", [&] { (void)matmul(gz, w); });
  part("fc2 bwd: dW = g^T h", [&] { (void)matmul(gz.transpose(0, 1), h); });
  part("fc2 bwd: db = sum of g's rows", [&] { (void)sum(gz, {0}); });
  part("fc2 bwd: dW = (h^T g)^T", [&] { (void)matmul(h.transpose(0, 1), gz).transpose(0, 1).contiguous(); });
  part("fc2 bwd: dW with g^T copied first", [&] { (void)matmul(gz.transpose(0, 1).contiguous(), h); });
  const Tensor gh = randn({batch, 128}, &g, kGpu);
  part("fc1 bwd: dW = g^T x (128 x B x 3136)", [&] { (void)matmul(gh.transpose(0, 1), p2); });
  part("fc1 bwd: dW = (x^T g)^T", [&] { (void)matmul(p2.transpose(0, 1), gh).transpose(0, 1).contiguous(); });
}
}  // namespace

int main(int argc, char** argv) {
  bool quick = false;
  engine::Flags flags("gpu_bench", "GPU kernels, GEMM and training steps on cuda:0.");
  flags.add("--quick", &quick, "fewer repetitions");
  flags.parse_or_exit(argc, argv);
  if (cuda::device_count() == 0) {
    std::printf("SKIPPED gpu_bench: no usable GPU (%s)\n", cuda::unavailable_reason().c_str());
    return 0;
  }
  std::printf("{\"impl\": \"engine\", \"bench\": \"device\", \"name\": \"%s\", \"sms\": %d}\n",
              cuda::device_name(0).c_str(), cuda::multiprocessor_count(0));
  bandwidth(quick ? (1 << 20) : (int64_t(1) << 28));  // 1 GiB per float tensor: far beyond the L2
  gemm(quick ? 256 : 4096);
  conv_layer(256, 1, 32, 28);
  conv_layer(256, 32, 64, 14);
  cnn_parts(256);
  for (const char* model : {"mlp", "cnn", "mlp-ddp"})
    for (int64_t batch : {64, 256}) train_step(model, batch, quick ? 5 : 50);
  for (const char* model : {"mlp", "cnn"})
    for (int64_t batch : {64, 256}) train_step(model, batch, quick ? 5 : 50, /*autocast=*/true);
  for (const char* model : {"mlp", "cnn"})
    for (int64_t batch : {64, 256}) train_step(model, batch, quick ? 5 : 50, /*autocast=*/false, /*graph=*/true);
  return 0;
}
