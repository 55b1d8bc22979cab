// One training step of the MLP 784-256-256-10 (SGD momentum 0.9, cross-entropy, random
// data, one thread): the same workload as ../shared/reference/torch_mlp_step.py, printed
// as the same JSON line so bench/train_step.py can set the two side by side. --model cnn:
// the lessons' CNN (lessons/fashion_mnist), beside bench/torch_cnn_step.py.
//
//   bazel run //bench:train_step -- --batch 64
//   bazel run //bench:train_step -- --batch 64 --model cnn
//   bazel run //bench:train_step -- --batch 256 --autocast both   # bfloat16 autocast beside float32
//   bazel run //bench:train_step -- --model cnn --gemm-reference  # the step's GFLOP/s over the GEMM's
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/median.h"
#include "lessons/fashion_mnist/trainer.h"
#include "nn/autocast.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cpu_features.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

namespace {
std::shared_ptr<Module> make(const std::string& model) {
  if (model == "cnn") return fmnist::make_model("cnn", 0);  // the lesson's CNN, as bench/torch_cnn_step.py
  manual_seed(0);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
      std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
}
// Multiply-add flops of one sample's training step: the forward's products (2 per weight
// use), the weight gradients (as many), and the input gradients of every layer but the
// first (whose input needs none). Convolutions count 2 C kh kw per output element.
double step_flops_per_sample(const std::string& model) {
  if (model == "cnn") {
    const double conv1 = 2.0 * 32 * 1 * 9 * 28 * 28, conv2 = 2.0 * 64 * 32 * 9 * 14 * 14;
    const double fc1 = 2.0 * 64 * 7 * 7 * 128, fc2 = 2.0 * 128 * 10;
    return 2 * (conv1 + conv2 + fc1 + fc2) + (conv2 + fc1 + fc2);  // 25.0 MFLOP
  }
  const double l1 = 2.0 * 784 * 256, l2 = 2.0 * 256 * 256, l3 = 2.0 * 256 * 10;
  return 2 * (l1 + l2 + l3) + (l2 + l3);  // 1.21 MFLOP
}

// GFLOP/s of our gemm() on 256 x 256 x 256, the reference the step is measured against.
double gemm_256_gflops() {
  static std::vector<float> a(256 * 256, 0.5f), b(256 * 256, 0.25f), c(256 * 256);
  const double s =
      time_call([] { gemm(256, 256, 256, a.data(), 256, 1, b.data(), 256, 1, c.data(), 256, 1, false); }, 0.2);
  return 2.0 * 256 * 256 * 256 / s / 1e9;
}
}  // namespace

int main(int argc, char** argv) try {
  int64_t batch = 64;
  int steps = 200, rounds = 5;
  std::string autocast = "off", model_name = "mlp";
  bool gemm_reference = false;
  Flags flags("train_step",
              "Times a training step (the MLP 784-256-256-10 or the lessons' CNN, SGD momentum) on one thread.");
  flags.add("--model", &model_name, {"mlp", "cnn"},
            "mlp: 784-256-256-10; cnn: conv32-bn-relu-pool, conv64-bn-relu-pool, fc128, fc10");
  flags.add("--batch", &batch, 1, 1 << 16, "images per step");
  flags.add("--steps", &steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.add("--autocast", &autocast, {"off", "bf16", "both"},
            "forward under bfloat16 autocast; both: float32 and bfloat16 steps in alternating rounds, and their ratio");
  flags.add("--gemm-reference", &gemm_reference,
            "after each round, time our GEMM on 256^3 and report the step's GFLOP/s as a fraction of it");
  flags.parse_or_exit(argc, argv);
  auto model32 = make(model_name), model16 = make(model_name);
  model32->train();
  model16->train();
  SGD opt32(model32->parameters(), {.lr = 0.01, .momentum = 0.9}),
      opt16(model16->parameters(), {.lr = 0.01, .momentum = 0.9});
  const Tensor x = model_name == "cnn" ? randn({batch, 1, 28, 28}) : randn({batch, 784});
  const Tensor y = randint(0, 10, {batch});
  auto step = [&](bool half) {
    SGD& opt = half ? opt16 : opt32;
    Module& model = half ? *model16 : *model32;
    opt.zero_grad();
    Variable loss;
    {
      Autocast ac(DType::BFloat16, half);
      loss = cross_entropy(model(Variable(x)), y);
    }
    loss.backward();
    opt.step();
  };
  std::vector<bool> kinds;
  if (autocast != "bf16") kinds.push_back(false);
  if (autocast != "off") kinds.push_back(true);
  for (bool k : kinds)
    for (int i = 0; i < 20; ++i) step(k);
  std::vector<double> times[2], ratio, step_gf, gemm_gf, fraction;
  for (int r = 0; r < rounds; ++r) {
    for (bool k : kinds) {
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step(k);
      times[k].push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count() / steps);
    }
    if (kinds.size() == 2) ratio.push_back(times[0].back() / times[1].back());
    if (gemm_reference) {  // right after the round, so both see the machine in the same state
      step_gf.push_back(step_flops_per_sample(model_name) * double(batch) / times[kinds[0]].back() / 1e9);
      gemm_gf.push_back(gemm_256_gflops());
      fraction.push_back(step_gf.back() / gemm_gf.back());
    }
  }
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  for (bool k : kinds) {
    const double s = median(times[k]);
    std::printf(
        "{\"impl\": \"engine\", \"model\": \"%s\", \"batch\": %lld, \"threads\": 1, \"cpu\": \"%s\", "
        "\"autocast\": \"%s\", \"step_ms\": %.4f, \"samples_per_s\": %.1f, \"peak_rss_mb\": %.1f}\n",
        model_name == "cnn" ? "cnn-conv32-conv64-fc128-fc10" : "mlp-784-256-256-10", (long long)batch,
        cpu_level_name(cpu_level()), k ? "bf16" : "off", s * 1e3, double(batch) / s, usage.ru_maxrss / 1024.0);
  }
  if (gemm_reference)
    std::printf(
        "{\"bench\": \"step_vs_gemm\", \"model\": \"%s\", \"batch\": %lld, \"mflop_per_sample\": %.3f, "
        "\"step_gflops\": %.1f, \"gemm_256_gflops\": %.1f, \"fraction\": %.3f, \"fma_peak_gflops\": %.1f}\n",
        model_name.c_str(), (long long)batch, step_flops_per_sample(model_name) / 1e6, median(step_gf), median(gemm_gf),
        median(fraction), fma_peak_gflops());
  if (!ratio.empty())
    std::printf(
        "{\"bench\": \"autocast_speedup\", \"batch\": %lld, \"bf16_over_fp32\": %.3f, \"bf16_kernel\": \"%s\"}\n",
        (long long)batch, median(ratio), engine::bf16_kernel_name().c_str());
  return 0;
} catch (const std::exception& e) {  // a failed allocation, say: said, not an abort
  std::fprintf(stderr, "train_step: %s\n", e.what());
  return 1;
}
