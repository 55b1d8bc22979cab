// Lesson 3, step 9: mixed precision and compressed gradients. Three parts, each run here:
//   1. what bfloat16 and float16 keep and lose: a few values' bits in each format;
//   2. loss scaling: float16 gradients that vanish, then rescued by a GradScaler, and a
//      scale too large, whose step is skipped;
//   3. what DDP sends: the toy MLP trained under bfloat16 autocast, plain, with
//      bf16_compress_hook, and with PowerSGD, bytes counted on the ring.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:09_mixed_precision_and_compressed_gradients
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/powersgd.h"
#include "dist/tcp_group.h"
#include "lessons/common/lesson.h"
#include "nn/autocast.h"
#include "nn/functional.h"
#include "nn/grad_scaler.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

namespace {

std::string bits(uint32_t v, int n) {
  std::string s;
  for (int i = n - 1; i >= 0; --i) s += ((v >> i) & 1) ? '1' : '0';
  return s;
}

// 1. Each value in the three formats: its bits (sign|exponent|mantissa) and what it reads back as.
void show_formats() {
  std::printf("1. What each format keeps (sign | exponent | mantissa):\n");
  for (float x : {1.0f / 3, 1.00390625f, 70000.0f, 1e-8f}) {
    const bfloat16 b(x);
    const float16 h(x);
    const uint32_t f = float_bits(x);
    std::printf("   %-12.9g float32  %s|%s|%s\n", double(x), bits(f >> 31, 1).c_str(), bits(f >> 23, 8).c_str(),
                bits(f, 23).c_str());
    std::printf("   %12s bfloat16 %s|%s|%-23s = %.9g\n", "", bits(b.bits >> 15, 1).c_str(),
                bits(b.bits >> 7, 8).c_str(), bits(b.bits, 7).c_str(), double(float(b)));
    std::printf("   %12s float16  %s|%-8s|%-23s = %.9g\n", "", bits(h.bits >> 15, 1).c_str(),
                bits(h.bits >> 10, 5).c_str(), bits(h.bits, 10).c_str(), double(float(h)));
  }
  std::printf(
      "   bfloat16 keeps float32's 8 exponent bits (its range) and 7 of its 23 mantissa bits;\n"
      "   float16 keeps 10 mantissa bits but 5 exponent bits: 70000 overflows, 1e-8 underflows.\n");
  lessons::report("bf16_third", float(bfloat16(1.0f / 3)));
  lessons::report("fp16_third", float(float16(1.0f / 3)));
  lessons::report("bf16_70000", float(bfloat16(70000.0f)));
  lessons::report("fp16_70000_is_inf", std::isinf(float(float16(70000.0f))) ? 1 : 0);
  lessons::report("fp16_1e-8", float(float16(1e-8f)));
  lessons::report("bf16_1e-8", float(bfloat16(1e-8f)));
}

// The gradient of a small linear layer whose loss is scaled down by 1e-7, so that its
// gradients (~1e-9) are below float16's smallest value (6e-8).
Tensor small_gradient(bool autocast, GradScaler* scaler) {
  Generator g(3);
  const Tensor x = randn({16, 8}, &g), y = randint(0, 4, {16}, &g);
  Variable w(randn({4, 8}, &g), true);
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
}

double relative(const Tensor& a, const Tensor& b) {
  return std::sqrt(sum((a - b) * (a - b)).item() / sum(b * b).item());
}

// 2. Loss scaling.
void show_loss_scaling() {
  std::printf("2. Loss scaling for float16:\n");
  const Tensor exact = small_gradient(false, nullptr), lost = small_gradient(true, nullptr);
  const double zeros = sum(eq(lost, zeros_like(lost))).item() / double(lost.numel());
  std::printf("   gradients ~%.0e in float32; under float16 autocast %.0f%% of them are exactly 0\n",
              max(abs(exact)).item(), 100 * zeros);
  GradScaler scaler;
  const Tensor rescued = small_gradient(true, &scaler);
  std::printf("   with a GradScaler (loss x %.0f, gradients / %.0f in float32): %.2e from float32's\n",
              scaler.get_scale(), scaler.get_scale(), relative(rescued, exact));
  lessons::report("fp16_zero_fraction", zeros);
  lessons::report("scaled_vs_fp32", relative(rescued, exact));
  // A scale too large: the gradients overflow to Inf, the step is skipped, the scale halves.
  Generator g(4);
  const Tensor x = randn({16, 8}, &g), y = randint(0, 4, {16}, &g);
  Variable w(randn({4, 8}, &g), true);
  SGD opt({w}, {.lr = 0.1});
  GradScaler big({.init_scale = 1e30});
  const Tensor before = w.data().clone();
  int skipped = 0;
  for (bool stepped = false; !stepped;) {
    opt.zero_grad();
    Variable loss;
    {
      Autocast ac(DType::Float16);
      loss = cross_entropy(linear(Variable(x), w, Variable()), y);
    }
    big.scale(loss).backward();
    stepped = big.step(opt);
    if (!stepped && skipped++ == 0)
      std::printf("   scale 1e30: the gradients overflow float16 (Inf); the step is skipped, weights unchanged: %s\n",
                  lessons::max_abs_diff(w.data(), before) == 0 ? "yes" : "no");
    big.update();
  }
  std::printf("   ... the scale halves after each skipped step: %d skipped, the first good one at %.4g\n", skipped,
              big.get_scale());
  lessons::report("skipped_steps", skipped);
  lessons::report("scale_after", big.get_scale());
}

enum class Way { Plain, Bf16Hook, PowerSGD };

// 3. Ten steps of the toy MLP under bfloat16 autocast, three ways; bytes this rank sent per step.
double train(Way way, dist::ProcessGroupTCP& group, std::shared_ptr<Sequential>* out) {
  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  dist::PowerSGDState state{.matrix_approximation_rank = 4, .start_powerSGD_iter = 2};
  if (way == Way::Bf16Hook) ddp.register_comm_hook(dist::hooks::bf16_compress_hook);
  if (way == Way::PowerSGD)
    ddp.register_comm_hook([&state](dist::GradBucket& b) { return dist::powerSGD_hook(state, b); });
  SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  constexpr int kSteps = 10;
  uint64_t sent = 0;
  for (int step = 0; step < kSteps; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * group.size() + group.rank(), 64, 0, &x, &y);
    opt.zero_grad();
    Variable loss;
    {
      Autocast ac(DType::BFloat16);  // the Linear layers multiply in bfloat16
      loss = cross_entropy(ddp(Variable(x)), y);
    }
    const uint64_t before = group.bytes_sent();
    loss.backward();                                             // the buckets are reduced during backward
    if (step == kSteps - 1) sent = group.bytes_sent() - before;  // the last step: PowerSGD is on
    opt.step();
  }
  *out = model;
  return double(sent);
}

}  // namespace

int main() try {
  // Bytes are counted on the ring (shared memory would move them without sockets).
  setenv("ENGINE_ALLREDUCE", "ring", /*overwrite=*/0);
  dist::init_process_group("gloo");
  auto* tcp = dynamic_cast<dist::ProcessGroupTCP*>(&dist::default_group());
  if (!tcp) throw std::runtime_error("this step counts bytes on the CPU backend (gloo)");
  const bool first = dist::get_rank() == 0;
  if (first) {
    show_formats();
    show_loss_scaling();
    std::printf("3. What DDP sends (all_reduce runs the %s; bytes this rank sent in one backward):\n",
                tcp->all_reduce_algorithm().c_str());
  }
  std::shared_ptr<Sequential> plain, bf16, psgd;
  const double plain_bytes = train(Way::Plain, *tcp, &plain);
  const double bf16_bytes = train(Way::Bf16Hook, *tcp, &bf16);
  const double psgd_bytes = train(Way::PowerSGD, *tcp, &psgd);
  const double bf16_apart = lessons::relative_difference(*bf16, *plain),
               psgd_apart = lessons::relative_difference(*psgd, *plain);
  if (first) {
    std::printf("   float32 gradients (no hook)        %9.0f bytes\n", plain_bytes);
    // The share of the float32 bytes; on 1 rank nothing is sent, so there is no share.
    const auto share = [&](double bytes, const char* format) {
      char text[32] = "no bytes on 1 rank";
      if (plain_bytes > 0) std::snprintf(text, sizeof text, format, bytes / plain_bytes);
      return std::string(text);
    };
    std::printf("   bf16_compress_hook                 %9.0f bytes (%s; weights after 10 steps %.1e apart)\n",
                bf16_bytes, share(bf16_bytes, "%.2f of that").c_str(), bf16_apart);
    std::printf("   PowerSGD rank 4 (from step 3)      %9.0f bytes (%s; weights %.1e apart)\n", psgd_bytes,
                share(psgd_bytes, "%.3f of that").c_str(), psgd_apart);
  }
  lessons::report("plain_bytes", plain_bytes);
  lessons::report("bf16_bytes", bf16_bytes);
  lessons::report("powersgd_bytes", psgd_bytes);
  lessons::report("bf16_apart", bf16_apart);
  lessons::report("powersgd_apart", psgd_apart);
  lessons::report("fingerprint_bf16", lessons::fingerprint(*bf16));
  lessons::report("fingerprint_powersgd", lessons::fingerprint(*psgd));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "error: %s\n", e.what());
  return 1;
}
