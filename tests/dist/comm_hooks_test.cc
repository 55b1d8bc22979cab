// DDP communication hooks against closed forms: allreduce_hook is DDP's average; the
// 16-bit compress hooks give each gradient's average to 16-bit precision and move half the
// bytes; PowerSGD at full rank is the average, at low rank sends fewer numbers, and its
// error feedback loses nothing over time (the sum of what it sent plus what it holds back
// is the sum of the true averages); training with a hook stays near training without.
#include <cmath>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "dist/join.h"
#include "dist/powersgd.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::testing::run_threads;

namespace {

using Factory = std::shared_ptr<Sequential> (*)();

// 6 -> 16 -> 4 with a ReLU: 180 parameters.
std::shared_ptr<Sequential> mlp() {
  Generator g(1);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(6, 16, true, &g), std::make_shared<ReLU>(), std::make_shared<Linear>(16, 4, true, &g)});
}
// 6 -> 4: its weight gradient G^T X (4 x 6, from 8 rows) has rank 3: cross-entropy's
// gradient rows G sum to zero over the 4 classes, so the 4 rows of G^T X do too. A rank-3
// approximation can therefore be exact. (Asking for more than the rank leaves P with a
// column of rounding noise, which Gram-Schmidt cannot make orthogonal.)
std::shared_ptr<Sequential> linear() {
  Generator g(1);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(6, 4, true, &g)});
}
// 6 -> 512 -> 4: enough bytes (5,636 parameters) that message headers do not count.
std::shared_ptr<Sequential> wide() {
  Generator g(1);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(6, 512, true, &g),
                                                             std::make_shared<ReLU>(),
                                                             std::make_shared<Linear>(512, 4, true, &g)});
}

// Rank r's batch at step s: 8 rows, different for every rank and step.
Variable loss_of(Module& m, int rank, int step) {
  Generator g(uint64_t(1000 * step + rank));
  return cross_entropy(m(Variable(randn({8, 6}, &g))), randint(0, 4, {8}, &g));
}

std::vector<float> flat_grads(Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    for (float v : p.grad().to_vector<float>()) out.push_back(v);
  return out;
}
std::vector<float> flat_weights(Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

// The true average of the ranks' gradients at `step` (each computed alone, no DDP).
std::vector<float> true_average(int world, int step, Factory make = mlp) {
  std::vector<float> sum;
  for (int r = 0; r < world; ++r) {
    auto m = make();
    loss_of(*m, r, step).backward();
    const std::vector<float> g = flat_grads(*m);
    if (sum.empty()) sum.assign(g.size(), 0);
    for (size_t i = 0; i < g.size(); ++i) sum[i] += g[i];
  }
  for (float& v : sum) v /= float(world);
  return sum;
}

// One backward of every rank under DDP with `hook` (none when empty); returns rank 0's
// averaged gradients and the bytes each rank sent during that backward.
std::pair<std::vector<float>, uint64_t> one_step(int world, const CommHook& hook, bool shm, Factory make = mlp) {
  std::vector<float> grads;
  uint64_t bytes = 0;
  std::mutex mu;
  run_threads(
      world,
      [&](ProcessGroupTCP& g) {
        DistributedDataParallel ddp(make(), {.bucket_cap_mb = 0.0005, .first_bucket_mb = 0.0005, .group = &g});
        if (hook) ddp.register_comm_hook(hook);
        const uint64_t before = g.bytes_sent();
        loss_of(ddp, g.rank(), 0).backward();
        std::lock_guard<std::mutex> lock(mu);
        if (g.rank() == 0) grads = flat_grads(ddp.module()), bytes = g.bytes_sent() - before;
      },
      std::chrono::seconds(20), shm);
  return {grads, bytes};
}

double max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
  REQUIRE(a.size() == b.size());
  double m = 0;
  for (size_t i = 0; i < a.size(); ++i) m = std::max(m, std::fabs(double(a[i]) - b[i]));
  return m;
}

}  // namespace

TEST_CASE("allreduce_hook gives DDP's average") {
  for (bool shm : {true, false}) {
    const auto [plain, plain_bytes] = one_step(3, nullptr, shm);
    const auto [hooked, hooked_bytes] = one_step(3, hooks::allreduce_hook, shm);
    REQUIRE(max_abs_diff(plain, true_average(3, 0)) < 1e-6);
    REQUIRE(max_abs_diff(hooked, plain) < 1e-6);  // divide-then-sum vs sum-then-divide: last bits
    REQUIRE(hooked_bytes == plain_bytes);
  }
}

TEST_CASE("bf16 and fp16 compress hooks: the average to 16-bit precision, half the bytes on the ring") {
  const std::vector<float> exact = true_average(3, 0, wide);
  const auto [plain, plain_bytes] = one_step(3, nullptr, /*shm=*/false, wide);
  for (auto [hook, bits] : {std::pair{CommHook(hooks::bf16_compress_hook), 8}, {hooks::fp16_compress_hook, 11}}) {
    const auto [got, bytes] = one_step(3, hook, /*shm=*/false, wide);
    // Each rank's share g/3 rounded (relative error 2^-bits), then two additions rounded
    // on the ring: within 3 roundings of the largest share.
    for (size_t i = 0; i < exact.size(); ++i) REQUIRE(std::fabs(got[i] - exact[i]) <= 4 * std::ldexp(1.0, -bits) * 0.5);
    REQUIRE(max_abs_diff(got, exact) > 0);  // it really did round
    INFO("plain " << plain_bytes << " B, compressed " << bytes << " B");
    REQUIRE(std::abs(double(bytes) - double(plain_bytes) / 2) <= double(plain_bytes) * 0.02);
  }
}

TEST_CASE("fp16_compress_hook overflows on gradients past 65504; bf16 keeps float32's range") {
  run_threads(2, [](ProcessGroupTCP& g) {
    GradBucket b;
    b.buffer = full({4}, 1e5);  // averaged: 1e5, beyond float16
    b.gradients = {b.buffer};
    b.group = &g;
    RANK_REQUIRE(std::isinf(hooks::fp16_compress_hook(b).wait().at({0})));
    b.buffer.fill_(1e5);
    RANK_REQUIRE(hooks::bf16_compress_hook(b).wait().at({0}) == 99840);  // 1e5 in bfloat16
  });
}

TEST_CASE("orthogonalize gives orthonormal columns") {
  Generator g(3);
  Tensor p = randn({20, 4}, &g);
  orthogonalize(p);
  const Tensor gram = matmul(p.transpose(0, 1), p);
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 4; ++j) REQUIRE(gram.at({i, j}) == Approx(i == j ? 1.0 : 0.0).margin(1e-5));
}

TEST_CASE("PowerSGD: plain all-reduce first; at full rank the exact average; fewer bytes at rank 1") {
  const std::vector<float> exact = true_average(2, 0);
  // start_powerSGD_iter = 1: step 0 is plain (allreduce_hook).
  PowerSGDState warmup_a{.start_powerSGD_iter = 1}, warmup_b{.start_powerSGD_iter = 1};
  std::vector<PowerSGDState*> warm = {&warmup_a, &warmup_b};
  const auto hook_of = [](std::vector<PowerSGDState*> states) {
    return [states](GradBucket& b) { return powerSGD_hook(*states[size_t(b.group->rank())], b); };
  };
  REQUIRE(max_abs_diff(one_step(2, hook_of(warm), false).first, exact) < 1e-6);
  REQUIRE(warmup_a.iter == 1);
  // r = rank(M) and every matrix compressed: P spans mean(M)'s columns, so
  // P P^T mean(M) = mean(M).
  PowerSGDState full_a{.matrix_approximation_rank = 3, .start_powerSGD_iter = 0, .min_compression_rate = 0},
      full_b = full_a;
  const auto [full, full_bytes] = one_step(2, hook_of({&full_a, &full_b}), false, linear);
  REQUIRE(max_abs_diff(full, true_average(2, 0, linear)) < 1e-5);
  // Rank 1: the weights 512x6 and 4x512 travel as (512+6) and (4+512) numbers, biases as
  // they are.
  const auto [wide_plain, wide_plain_bytes] = one_step(2, nullptr, false, wide);
  PowerSGDState low_a{.start_powerSGD_iter = 0}, low_b{.start_powerSGD_iter = 0};
  const auto [low, low_bytes] = one_step(2, hook_of({&low_a, &low_b}), false, wide);
  REQUIRE(low_a.numel_before_compression == 512 * 6 + 512 + 4 * 512 + 4);
  REQUIRE(low_a.numel_after_compression == (512 + 6) + 512 + (4 + 512) + 4);
  INFO("plain " << wide_plain_bytes << " B, PowerSGD rank 1 " << low_bytes << " B");
  REQUIRE(low_bytes < wide_plain_bytes / 3);
  REQUIRE(max_abs_diff(low, true_average(2, 0, wide)) > 1e-4);  // an approximation, not the average
}

// A residual laid out as the one bucket holds it (parameters in reverse order), rearranged
// into the parameters' order.
std::vector<float> in_parameter_order(const Tensor& residual, Module& m) {
  const std::vector<Variable> params = m.parameters();
  std::vector<std::vector<float>> parts(params.size());
  int64_t at = 0;
  for (size_t k = params.size(); k-- > 0;) {
    parts[k] = residual.narrow(0, at, params[k].numel()).to_vector<float>();
    at += params[k].numel();
  }
  std::vector<float> out;
  for (auto& p : parts) out.insert(out.end(), p.begin(), p.end());
  return out;
}

TEST_CASE("PowerSGD's error feedback: what it sent plus what it holds back is the true average, summed") {
  // Rank r's step k: input = M_k^r + e_{k-1}^r, sent A_k, kept e_k^r = input - A_k. Summed
  // over k: sum_k A_k = sum_k M_k^r - e_K^r on every rank, so sum_k A_k + mean_r e_K^r =
  // sum_k mean_r M_k^r. Without error feedback the left side falls short.
  const int world = 2, steps = 6;
  for (bool feedback : {true, false}) {
    PowerSGDState a{.start_powerSGD_iter = 0, .use_error_feedback = feedback}, b = a;
    std::vector<PowerSGDState*> states = {&a, &b};
    std::vector<double> sent;
    std::vector<float> residual_mean;
    std::mutex mu;
    run_threads(
        world,
        [&](ProcessGroupTCP& g) {
          DistributedDataParallel ddp(mlp(), {.bucket_cap_mb = 25, .first_bucket_mb = 25, .group = &g});  // 1 bucket
          PowerSGDState& s = *states[size_t(g.rank())];
          ddp.register_comm_hook([&s](GradBucket& bucket) { return powerSGD_hook(s, bucket); });
          std::vector<double> total;
          for (int k = 0; k < steps; ++k) {  // no optimizer step: M_k depends on k and the rank only
            ddp.zero_grad();
            loss_of(ddp, g.rank(), k).backward();
            const std::vector<float> gk = flat_grads(ddp.module());
            if (total.empty()) total.assign(gk.size(), 0);
            for (size_t i = 0; i < gk.size(); ++i) total[i] += gk[i];
          }
          std::lock_guard<std::mutex> lock(mu);
          if (g.rank() == 0) sent = total;
          if (!feedback) return;
          const std::vector<float> mine = in_parameter_order(s.error.at(0), ddp.module());
          if (residual_mean.empty()) residual_mean.assign(mine.size(), 0);
          for (size_t i = 0; i < mine.size(); ++i) residual_mean[i] += mine[i] / float(world);
        },
        std::chrono::seconds(20), false);
    std::vector<double> truth;
    for (int k = 0; k < steps; ++k) {
      const std::vector<float> avg = true_average(world, k);
      if (truth.empty()) truth.assign(avg.size(), 0);
      for (size_t i = 0; i < avg.size(); ++i) truth[i] += avg[i];
    }
    double worst = 0;
    for (size_t i = 0; i < truth.size(); ++i)
      worst = std::max(worst, std::fabs(sent[i] + (feedback ? residual_mean[i] : 0.0) - truth[i]));
    INFO("error feedback " << feedback << ": largest gap " << worst);
    if (feedback)
      REQUIRE(worst < 1e-5);
    else
      REQUIRE(worst > 1e-3);
  }
}

TEST_CASE("PowerSGD refuses settings that would make every gradient 0 or NaN") {
  const auto refused = [](PowerSGDState s, const std::string& why) {
    std::vector<PowerSGDState> states(2, s);
    run_threads(2, [&](ProcessGroupTCP& g) {
      DistributedDataParallel ddp(mlp(), {.group = &g});
      ddp.register_comm_hook([&st = states[size_t(g.rank())]](GradBucket& b) { return powerSGD_hook(st, b); });
      RANK_REQUIRE_THROWS_WITH(loss_of(ddp, g.rank(), 0).backward(), Catch::Contains(why));
    });
  };
  refused({.matrix_approximation_rank = 0}, "matrix_approximation_rank must be at least 1, got 0");
  refused({.min_compression_rate = NAN}, "min_compression_rate must be a finite number >= 0, got nan");
  refused({.orthogonalization_epsilon = -1}, "orthogonalization_epsilon must be a finite number >= 0, got -1");
}

TEST_CASE("orthogonalize leaves a zero column 0, not NaN") {
  Tensor p = from_vector(std::vector<float>{0, 3, 0, 4}, {2, 2});  // columns (0, 0) and (3, 4)
  orthogonalize(p);
  REQUIRE(p.to_vector<float>() == std::vector<float>{0, 0.6f, 0, 0.8f});
}

// Rank 0's averaged gradients after each of `steps` (the data of step k is loss_of(.., k)),
// PowerSGD at rank 1 from the first step, one bucket. At step `poison` rank 1's bucket
// element `element` is made inf before the hook sees it; zero_input makes every rank's
// input 0 at step 0 (so the first layer's weight gradient is exactly 0).
std::vector<std::vector<float>> powersgd_steps(const std::vector<int>& steps, int poison = -1, int element = 0,
                                               bool zero_input = false) {
  std::vector<PowerSGDState> states(2, PowerSGDState{.start_powerSGD_iter = 0});
  std::vector<std::vector<float>> out;
  std::mutex mu;
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        DistributedDataParallel ddp(mlp(), {.bucket_cap_mb = 25, .first_bucket_mb = 25, .group = &g});  // 1 bucket
        PowerSGDState& s = states[size_t(g.rank())];
        int step = 0;
        ddp.register_comm_hook([&](GradBucket& b) {
          if (step == poison && g.rank() == 1) {
            float* at = b.buffer.data<float>() + element;
            *at = INFINITY;
          }
          return powerSGD_hook(s, b);
        });
        for (int k : steps) {
          step = k;
          ddp.zero_grad();
          Generator gen(uint64_t(1000 * k + g.rank()));
          Tensor x = randn({8, 6}, &gen);
          if (zero_input && k == 0) x = zeros({8, 6});
          cross_entropy(ddp(Variable(x)), randint(0, 4, {8}, &gen)).backward();
          std::lock_guard<std::mutex> lock(mu);
          if (g.rank() == 0) out.push_back(flat_grads(ddp.module()));
        }
        for (const auto& [index, e] : s.error) RANK_REQUIRE(all_finite(e));
        for (const auto& [index, qs] : s.qs)
          for (const Tensor& q : qs) RANK_REQUIRE(all_finite(q));
      },
      std::chrono::seconds(20), false);
  return out;
}

bool finite(const std::vector<float>& v) {
  for (float x : v)
    if (!std::isfinite(x)) return false;
  return true;
}

TEST_CASE("PowerSGD: a gradient that is exactly 0 is sent as 0, and the next ones still travel") {
  // mlp()'s first weight is 16 x 6 (compressed at rank 1); with inputs of 0 its gradient
  // G^T X is 0 on every rank. Parameters in order: 0.weight (96), 0.bias, 2.weight, 2.bias.
  const auto grads = powersgd_steps({0, 1, 2}, -1, 0, /*zero_input=*/true);
  const auto first_weight = [](const std::vector<float>& g) { return std::vector<float>(g.begin(), g.begin() + 96); };
  REQUIRE(finite(grads[0]));  // 0 / 0 in Gram-Schmidt made every gradient NaN
  REQUIRE(first_weight(grads[0]) == std::vector<float>(96, 0.0f));
  // Its warm-start Q was 0 (Q = M^T P): kept, every later P = M Q would be 0 too, and the
  // layer would never be sent again. It is drawn afresh.
  for (int k : {1, 2}) {
    REQUIRE(finite(grads[size_t(k)]));
    double norm = 0;
    for (float v : first_weight(grads[size_t(k)])) norm += double(v) * v;
    REQUIRE(norm > 1e-6);
  }
}

TEST_CASE("PowerSGD: a step with inf on one rank is NaN for all, and leaves the state as it was") {
  // What a GradScaler meets in float16: a step that overflows must come out not finite (so
  // the scaler skips it), and the next steps must be what they would have been without it.
  // A NaN residual or warm-start Q kept from it made every later step NaN: the scaler then
  // skipped every step for good. Element 0 of the bucket is 2.bias[0] (sent uncompressed),
  // element 4 is 2.weight[0][0] (compressed).
  const auto clean = powersgd_steps({0, 2, 3});
  REQUIRE(finite(clean[2]));
  for (int element : {0, 4}) {
    INFO("inf at bucket element " << element);
    const auto poisoned = powersgd_steps({0, 1, 2, 3}, /*poison=*/1, element);
    REQUIRE(poisoned[0] == clean[0]);
    REQUIRE_FALSE(finite(poisoned[1]));
    REQUIRE(poisoned[2] == clean[1]);
    REQUIRE(poisoned[3] == clean[2]);
  }
}

// 30 SGD steps of mlp() on 2 ranks with `hook` (none when empty): rank 0's final weights
// and its loss on a held-out batch.
std::pair<std::vector<float>, double> train(const std::function<CommHook(int rank)>& hook_for) {
  std::vector<float> weights;
  double loss = 0;
  std::mutex mu;
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        DistributedDataParallel ddp(mlp(), {.group = &g});
        if (hook_for) ddp.register_comm_hook(hook_for(g.rank()));
        SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
        for (int k = 0; k < 30; ++k) {
          opt.zero_grad();
          loss_of(ddp, g.rank(), k).backward();
          opt.step();
        }
        std::lock_guard<std::mutex> lock(mu);
        if (g.rank() == 0) weights = flat_weights(ddp.module()), loss = loss_of(ddp.module(), 7, 999).data().item();
      },
      std::chrono::seconds(20), false);
  return {weights, loss};
}

double relative_distance(const std::vector<float>& a, const std::vector<float>& b) {
  double d = 0, n = 0;
  for (size_t i = 0; i < a.size(); ++i) d += std::pow(double(a[i]) - b[i], 2), n += double(b[i]) * b[i];
  return std::sqrt(d / n);
}

TEST_CASE("training with a compress hook stays near training without one") {
  const auto [plain, plain_loss] = train(nullptr);
  const auto [bf16, bf16_loss] = train([](int) { return CommHook(hooks::bf16_compress_hook); });
  const auto [fp16, fp16_loss] = train([](int) { return CommHook(hooks::fp16_compress_hook); });
  std::vector<PowerSGDState> states(2, PowerSGDState{.matrix_approximation_rank = 2, .start_powerSGD_iter = 5});
  const auto [psgd, psgd_loss] =
      train([&](int r) { return CommHook([&s = states[size_t(r)]](GradBucket& b) { return powerSGD_hook(s, b); }); });
  INFO("weights apart after 30 steps: bf16 "
       << relative_distance(bf16, plain) << ", fp16 " << relative_distance(fp16, plain) << ", PowerSGD rank 2 "
       << relative_distance(psgd, plain) << "; held-out loss: plain " << plain_loss << ", bf16 " << bf16_loss
       << ", fp16 " << fp16_loss << ", PowerSGD " << psgd_loss);
  REQUIRE(relative_distance(bf16, plain) < 1e-2);
  REQUIRE(relative_distance(fp16, plain) < 2e-3);
  REQUIRE(relative_distance(fp16, plain) < relative_distance(bf16, plain));  // 3 more bits
  REQUIRE(relative_distance(psgd, plain) < 0.2);
  REQUIRE(std::fabs(bf16_loss - plain_loss) < 0.02 * plain_loss);
}

TEST_CASE("hooks: registered once, a wrong result is named, not with Join") {
  run_threads(2, [](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    ddp.register_comm_hook(hooks::allreduce_hook);
    RANK_REQUIRE_THROWS_WITH(ddp.register_comm_hook(hooks::allreduce_hook), Catch::Contains("only be called once"));
    RANK_REQUIRE_THROWS_WITH(Join(ddp), Catch::Contains("communication hook"));
  });
  run_threads(2, [](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    ddp.register_comm_hook([](GradBucket&) { return Future(zeros({3})); });
    RANK_REQUIRE_THROWS_WITH(
        loss_of(ddp, g.rank(), 0).backward(),
        Catch::Contains(
            "must be a float32 tensor of 180 elements (the bucket), got 3 float32"));  // 180 = mlp()'s parameters
  });
}

TEST_CASE("a hook's Future with a Work made by hand: complete at once, never a wait with no end") {
  // A hook that reduces synchronously and returns Future(Work(), result): the Work it made
  // is complete, so DDP goes on (a default Work used to be one nothing would ever finish).
  REQUIRE(Work().is_completed());
  REQUIRE_FALSE(Work::pending().is_completed());
  const auto [plain, plain_bytes] = one_step(2, nullptr, /*shm=*/true);
  const auto [by_hand, by_hand_bytes] = one_step(
      2,
      [](GradBucket& b) {
        b.group->all_reduce(b.buffer, ReduceOp::Avg).wait();
        return Future(Work(), b.buffer);
      },
      /*shm=*/true);
  REQUIRE(by_hand == plain);
  // The same with a result of the wrong size is named, as above, instead of waiting.
  run_threads(2, [](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    ddp.register_comm_hook([](GradBucket&) { return Future(Work(), zeros({3})); });
    RANK_REQUIRE_THROWS_WITH(loss_of(ddp, g.rank(), 0).backward(), Catch::Contains("got 3 float32"));
  });
}
