// Join with uneven inputs: ranks with different numbers of batches neither hang nor
// diverge. The result equals the closed form: at each step, the sum of the gradients of
// the ranks that still have data, divided by the world size (PyTorch's default,
// divide_by_initial_world_size), and every replica ends the same.
#include <cmath>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/join.h"
#include "dist/sync_batchnorm.h"
#include "dist/zero.h"
#include "nn/adam.h"
#include "nn/batchnorm.h"
#include "nn/clip_grad.h"
#include "nn/grad_scaler.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using namespace std::chrono_literals;
using engine::testing::ProcessGroupTCP;
using engine::testing::run_threads;

namespace {
std::shared_ptr<Sequential> mlp() {
  Generator g(3);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(5, 8, true, &g), std::make_shared<ReLU>(), std::make_shared<Linear>(8, 3, true, &g)});
}

// Rank r's batch number s: its own data, 4 rows.
void batch(int r, int s, Tensor* x, Tensor* y) {
  Generator g(uint64_t(100 * r + s));
  *x = randn({4, 5}, &g);
  *y = randint(0, 3, {4}, &g);
}

// Clips the averaged gradient to max_norm: for SGD over DDP with nn's clip_grad_norm_, for
// a ZeRO optimizer with its own (a collective in its reduce-scatter design).
void clip(SGD&, DistributedDataParallel& ddp, double max_norm) { clip_grad_norm_(ddp.parameters(), max_norm); }
void clip(ZeroRedundancyOptimizer& opt, DistributedDataParallel&, double max_norm) { opt.clip_grad_norm_(max_norm); }

// Rank `rank`'s first n batches through DDP, stepping `opt` (an SGD or a ZeRO optimizer),
// clipping the gradient first when max_norm > 0, and multiplying the learning rate by
// `decay` after each step (a schedule).
template <typename Optimizer>
void train_on(DistributedDataParallel& ddp, Optimizer& opt, int rank, int n, double max_norm = 0, double decay = 1) {
  for (int s = 0; s < n; ++s) {
    Tensor x, y;
    batch(rank, s, &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    if (max_norm > 0) clip(opt, ddp, max_norm);
    opt.step();
    opt.set_lr(opt.lr() * decay);
  }
}

std::vector<float> flat(Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

// The closed form, in one process: each step, the ranks that still have a batch add
// their gradients; the sum is divided by the world size (and clipped when max_norm > 0);
// the learning rate is multiplied by `decay` after each step.
std::vector<float> closed_form(const std::vector<int>& batches, double max_norm = 0, double decay = 1) {
  const int world = int(batches.size()), steps = *std::max_element(batches.begin(), batches.end());
  auto model = mlp();
  SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    std::vector<Tensor> sum;
    for (int r = 0; r < world; ++r) {
      if (s >= batches[size_t(r)]) continue;
      Tensor x, y;
      batch(r, s, &x, &y);
      model->zero_grad();
      cross_entropy((*model)(Variable(x)), y).backward();
      const auto ps = model->parameters();
      for (size_t i = 0; i < ps.size(); ++i) {
        if (sum.size() <= i)
          sum.push_back(ps[i].grad().clone());
        else
          sum[i] = sum[i] + ps[i].grad();
      }
    }
    auto ps = model->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(sum[i] / double(world));
    if (max_norm > 0) clip_grad_norm_(ps, max_norm);
    opt.step();
    opt.set_lr(opt.lr() * decay);
  }
  return flat(*model);
}
// 2 ranks under DDP with a ZeRO optimizer (PyTorch's pairing) and a Join, rank r with r + 1
// batches; the optimizer given to the Join or not, stepped plainly or through a GradScaler.
// Returns each rank's error (empty when it finished).
std::vector<std::string> uneven_zero_errors(bool join_optimizer, bool scaled, std::chrono::seconds timeout) {
  std::vector<std::string> errors(2);
  std::mutex mu;
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        DistributedDataParallel ddp(mlp(), {.group = &g});
        ZeroRedundancyOptimizer opt(ddp.parameters(), ZeroOptimizer::SGD,
                                    {.sgd = {.lr = 0.1}, .adam = {}, .group = &g, .ddp_averages_gradients = true});
        GradScaler scaler({.enabled = scaled});
        Join join = join_optimizer ? Join(ddp, {&opt}) : Join(ddp);
        try {
          for (int s = 0; s < 1 + g.rank(); ++s) {
            Tensor x, y;
            batch(g.rank(), s, &x, &y);
            opt.zero_grad();
            scaler.scale(cross_entropy(ddp(Variable(x)), y)).backward();
            scaler.step(opt);
            scaler.update();
          }
          join.finish();
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(mu);
          errors[size_t(g.rank())] = e.what();
        }
      },
      timeout);
  return errors;
}
// 2 ranks: an epoch under a Join with 1 and 3 batches, then one under another Join with
// 3 batches each (as a loop that wraps every epoch in a Join).
// The optimizer is plain SGD, SGD with momentum, or Adam whose learning rate shrinks by
// 0.9 every step; with `scaled`, stepped through a GradScaler whose scale doubles after
// every good step. `sync` gives both to the Join. Returns each rank's weights and scale.
enum class Opt { SGD, Momentum, AdamSchedule };
struct TwoEpochs {
  std::vector<std::vector<float>> weights{2};
  std::vector<double> scales = std::vector<double>(2), lrs = std::vector<double>(2);
  std::vector<std::string> errors{2};  // what the second epoch threw
};
TwoEpochs two_epochs(Opt kind, bool scaled, bool sync) {
  TwoEpochs out;
  run_threads(2, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    std::unique_ptr<Optimizer> opt;
    if (kind == Opt::AdamSchedule)
      opt = std::make_unique<Adam>(ddp.parameters(), AdamOptions{.lr = 0.01});
    else
      opt = std::make_unique<SGD>(ddp.parameters(), SGDOptions{.lr = 0.1, .momentum = kind == Opt::Momentum ? 0.9 : 0});
    GradScaler scaler({.init_scale = 1024, .growth_interval = 1, .enabled = scaled});
    auto step = [&](int s) {
      Tensor x, y;
      batch(g.rank(), s, &x, &y);
      opt->zero_grad();
      scaler.scale(cross_entropy(ddp(Variable(x)), y)).backward();
      scaler.step(*opt);
      scaler.update();
      if (kind == Opt::AdamSchedule) opt->set_lr(opt->lr() * 0.9);
    };
    auto epoch = [&](int first, int batches) {
      Join join = sync ? Join(ddp, {}, {.optimizers = {opt.get()}, .scaler = &scaler}) : Join(ddp);
      for (int s = first; s < first + batches; ++s) step(s);
      join.finish();
    };
    epoch(0, 1 + 2 * g.rank());
    try {
      epoch(10, 3);
    } catch (const Error& e) {
      out.errors[size_t(g.rank())] = e.what();
    }
    out.weights[size_t(g.rank())] = flat(ddp.module());
    out.scales[size_t(g.rank())] = scaler.get_scale();
    out.lrs[size_t(g.rank())] = opt->lr();
  });
  return out;
}
}  // namespace

TEST_CASE("Join: ranks with 2, 4 and 3 batches train to the closed form, and every replica ends the same") {
  for (const std::vector<int>& batches :
       {std::vector<int>{2, 4}, std::vector<int>{2, 4, 3}, std::vector<int>{5, 1, 1}}) {
    const int world = int(batches.size());
    INFO("batches per rank: " << batches[0] << ", " << batches[1]
                              << (world > 2 ? ", " + std::to_string(batches[2]) : ""));
    const std::vector<float> expect = closed_form(batches);
    std::vector<std::vector<float>> got(static_cast<size_t>(world));
    std::vector<int> shadowed(static_cast<size_t>(world));
    run_threads(
        world,
        [&](ProcessGroupTCP& g) {
          DistributedDataParallel ddp(mlp(), {.group = &g});
          SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
          Join join(ddp);
          train_on(ddp, opt, g.rank(), batches[size_t(g.rank())]);
          shadowed[size_t(g.rank())] = join.finish();
          got[size_t(g.rank())] = flat(ddp.module());
        },
        10s);
    const int most = *std::max_element(batches.begin(), batches.end());
    for (int r = 0; r < world; ++r) {
      INFO("rank " << r);
      REQUIRE(shadowed[size_t(r)] == most - batches[size_t(r)]);  // it stood in for every step it had no data for
      REQUIRE(got[size_t(r)] == got[0]);                          // replicas identical, bit for bit
    }
    REQUIRE(got[0].size() == expect.size());
    for (size_t i = 0; i < expect.size(); ++i) {
      INFO("parameter value " << i);
      REQUIRE(std::fabs(got[0][i] - expect[i]) <= 1e-6f * (1 + std::fabs(expect[i])));
    }
  }
}

TEST_CASE("Join with a ZeroRedundancyOptimizer: a finished rank steps its shard as the others would") {
  // As PyTorch's Join([model, optim]): each rank owns a shard of the optimizer state, so a
  // rank out of data must still step its shard (with the others' average, which its shadow
  // backward leaves in .grad) and all-gather the shards. Its learning rate and clip come
  // from a rank still training, so it follows a schedule (PyTorch's does not) and clips as
  // they do, even with no batch of its own. The result is the same closed form as DDP with
  // an unsharded optimizer.
  for (const std::vector<int>& batches : {std::vector<int>{2, 4, 3}, std::vector<int>{0, 3}})
    for (double max_norm : {0.0, 0.2})
      for (double decay : {1.0, 0.7})
        for (bool ddp_averages : {true, false}) {
          INFO(batches.size() << " ranks, rank 0 with " << batches[0] << " batches, ddp_averages_gradients "
                              << ddp_averages << ", max_norm " << max_norm << ", decay " << decay);
          const std::vector<float> expect = closed_form(batches, max_norm, decay);
          std::vector<std::vector<float>> got(batches.size());
          run_threads(
              int(batches.size()),
              [&](ProcessGroupTCP& g) {
                DistributedDataParallel ddp(mlp(), {.group = &g});
                ZeroRedundancyOptimizer opt(ddp.parameters(), ZeroOptimizer::SGD,
                                            {.sgd = {.lr = 0.1, .momentum = 0.9},
                                             .adam = {},
                                             .group = &g,
                                             .ddp_averages_gradients = ddp_averages});
                Join join(ddp, {&opt});
                train_on(ddp, opt, g.rank(), batches[size_t(g.rank())], max_norm, decay);
                join.finish();
                got[size_t(g.rank())] = flat(ddp.module());
              },
              10s);
          for (size_t r = 0; r < batches.size(); ++r) REQUIRE(got[r] == got[0]);
          for (size_t i = 0; i < expect.size(); ++i) {
            INFO("parameter value " << i);
            REQUIRE(std::fabs(got[0][i] - expect[i]) <= 1e-6f * (1 + std::fabs(expect[i])));
          }
        }
}

TEST_CASE("Join with the optimizer: every rank goes on with the last finisher's momentum, moments and rate") {
  for (Opt kind : {Opt::Momentum, Opt::AdamSchedule}) {
    const TwoEpochs given = two_epochs(kind, /*scaled=*/false, /*sync=*/true);
    REQUIRE(given.weights[0] == given.weights[1]);
    REQUIRE(given.lrs[0] == given.lrs[1]);  // the double itself, not its float32 rounding
    if (kind == Opt::AdamSchedule) REQUIRE(given.lrs[0] == 0.01 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9 * 0.9);
    REQUIRE(given.errors == std::vector<std::string>{"", ""});
    // Not given (PyTorch's Join): the weights are made equal at finish(), but rank 0's
    // momentum (or Adam's moments, step count and rate) stopped at its last step, so the
    // same averaged gradients then moved the replicas differently. DDP's replica check
    // stops the run at its next check, on every rank, naming the cause: training forward 4
    // (1 in the first epoch, where rank 0 then finished, and 2, 3, 4 in the second).
    const TwoEpochs forgotten = two_epochs(kind, false, false);
    for (const std::string& e : forgotten.errors)
      REQUIRE_THAT(e, Catch::Contains("the replicas differ at training forward 4: parameter \"0.weight\" on rank") &&
                          Catch::Contains("give it to the Join: JoinSync"));
  }
}

TEST_CASE("Join with a GradScaler: every rank goes on with the last finisher's scale") {
  // Scales are powers of two, so scaling and unscaling are exact: the run equals the one
  // without loss scaling, bit for bit.
  const TwoEpochs unscaled = two_epochs(Opt::SGD, /*scaled=*/false, /*sync=*/true);
  const TwoEpochs given = two_epochs(Opt::SGD, true, true);
  REQUIRE(given.scales == std::vector<double>{65536, 65536});  // 1024 doubled by 3 steps, then by 3
  REQUIRE(given.weights[0] == given.weights[1]);
  REQUIRE(given.weights[0] == unscaled.weights[0]);
  // Not given: rank 0 stopped at 2048 while rank 1 reached 8192. Each then unscaled the
  // average of differently scaled gradients by its own scale, and the replicas parted:
  // named at the next check.
  const TwoEpochs forgotten = two_epochs(Opt::SGD, true, false);
  REQUIRE(forgotten.scales == std::vector<double>{8192, 32768});  // two steps each in the second epoch
  REQUIRE_THAT(forgotten.errors[0], Catch::Contains("the replicas differ at training forward 4"));
}

TEST_CASE("Join names a GradScaler enabled on one rank and disabled on another") {
  std::string error;
  run_threads(2, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    GradScaler scaler({.enabled = g.rank() == 0});
    Join join(ddp, {}, {.optimizers = {}, .scaler = &scaler});
    if (g.rank() == 0) {
      try {
        join.finish();
      } catch (const Error& e) {
        error = e.what();
      }
    } else {
      Tensor x, y;
      batch(1, 0, &x, &y);
      cross_entropy(ddp(Variable(x)), y).backward();
      join.finish();
    }
  });
  REQUIRE_THAT(error, Catch::Contains("rank 1's GradScaler is disabled but rank 0's is enabled"));
}

TEST_CASE("Join: batch-norm statistics come from a rank still training, not from a finished rank 0") {
  // DDP broadcasts buffers at each forward. From rank 0 once it had finished, they were its
  // stale statistics: rank 1's 30 batches ended with num_batches_tracked 2 and a running
  // mean one step away from rank 0's. As PyTorch's DDP under Join, they now come from the
  // highest rank still training, so they equal rank 1's own batches through the layer.
  const auto model = [] {
    Generator g(1);
    return std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Linear>(5, 8, true, &g), std::make_shared<BatchNorm1d>(8)});
  };
  const auto batch_of = [](int rank, int s) {
    Generator g(uint64_t(100 * rank + s));
    return randn({4, 5}, &g) + 5.0;
  };
  auto alone = model();
  for (int s = 0; s < 30; ++s) (*alone)(Variable(batch_of(1, s)));
  std::vector<StateDict> got(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(model(), {.group = &g});
    Join join(ddp);
    for (int s = 0; s < (g.rank() == 0 ? 1 : 30); ++s) sum(ddp(Variable(batch_of(g.rank(), s)))).backward();
    join.finish();
    got[size_t(g.rank())] = ddp.module().state_dict();
  });
  for (const char* key : {"1.running_mean", "1.running_var", "1.num_batches_tracked"})
    for (const StateDict& sd : got) {
      INFO(key);
      REQUIRE(sd.at(key).to_vector<float>() == alone->state_dict().at(key).to_vector<float>());
    }
}

TEST_CASE("Join names what a finished rank cannot shadow: SyncBatchNorm, a ZeRO optimizer not given to it") {
  run_threads(2, [](ProcessGroupTCP& g) {
    auto model = std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Linear>(5, 8), std::make_shared<BatchNorm1d>(8)});
    DistributedDataParallel ddp(convert_sync_batchnorm(model, &g), {.group = &g});
    RANK_REQUIRE_THROWS_WITH(Join(ddp), Catch::Contains("the model's layer \"1\" is a SyncBatchNorm"));
  });
  const std::vector<std::string> errors = uneven_zero_errors(/*join_optimizer=*/false, /*scaled=*/false, 10s);
  REQUIRE_THAT(errors[0], Catch::Contains("mismatched collectives") && Catch::Contains("Join(ddp, {&optimizer})"));
}

TEST_CASE("Join with ZeRO over DDP refuses nn's clipping, which a finished rank could not repeat") {
  run_threads(2, [](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(), {.group = &g});
    ZeroRedundancyOptimizer opt(ddp.parameters(), ZeroOptimizer::SGD,
                                {.sgd = {.lr = 0.1}, .adam = {}, .group = &g, .ddp_averages_gradients = true});
    Tensor x, y;
    batch(g.rank(), 0, &x, &y);
    cross_entropy(ddp(Variable(x)), y).backward();
    RANK_REQUIRE(clip_grad_norm_(ddp.parameters(), 1.0) > 0);  // allowed outside a Join, as in PyTorch
    {
      Join join(ddp, {&opt});
      RANK_REQUIRE_THROWS_WITH(clip_grad_norm_(ddp.parameters(), 1.0),
                               Catch::Contains("given to a Join") && Catch::Contains("opt.clip_grad_norm_(max_norm)"));
      RANK_REQUIRE_THROWS_WITH(clip_grad_value_(ddp.parameters(), 1.0), Catch::Contains("given to a Join"));
      join.finish();
    }
    RANK_REQUIRE(clip_grad_norm_(ddp.parameters(), 1.0) > 0);  // and again once the Join has ended
  });
}

TEST_CASE("Join refuses to shadow a ZeRO step taken through a GradScaler, naming why") {
  // The finished rank's gradient (the others' average) is still multiplied by the scale,
  // which it does not know: stepping with it would all-gather a shard moved S times too far.
  const std::vector<std::string> errors = uneven_zero_errors(/*join_optimizer=*/true, /*scaled=*/true, 2s);
  REQUIRE_THAT(errors[0], Catch::Contains("the others step through a GradScaler"));
  INFO(errors[1]);
  REQUIRE_THAT(errors[1], Catch::Contains("rank 0"));  // its next collective names the one that left
}

TEST_CASE("without Join, uneven inputs stop the rank with more batches, naming the rank that left") {
  std::string error;
  std::mutex mu;
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        DistributedDataParallel ddp(mlp(), {.group = &g});
        SGD opt(ddp.parameters(), {.lr = 0.1});
        try {
          for (int s = 0; s < (g.rank() == 0 ? 1 : 2); ++s) {
            Tensor x, y;
            batch(g.rank(), s, &x, &y);
            opt.zero_grad();
            cross_entropy(ddp(Variable(x)), y).backward();
            opt.step();
          }
        } catch (const Error& e) {
          std::lock_guard<std::mutex> lock(mu);
          error = e.what();
        }
      },
      1s);
  // Rank 0 ran out of batches and destroyed its group (here its thread ended; a process
  // exits, or goes on): rank 1 is told at once, not at its timeout.
  RANK_REQUIRE_THAT(error, Catch::Contains("rank 0 left the process group") &&
                               Catch::Contains("while rank 1 waited for it in all_reduce("));
}
