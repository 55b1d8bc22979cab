// ZeRO stage 1: training matches DDP with an unsharded optimizer; each rank holds about
// 1/N of the optimizer state; the state consolidates on rank 0 and loads back sharded.
#include <cmath>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "dist/zero.h"
#include "nn/clip_grad.h"
#include "nn/grad_scaler.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/dist/small_mlp.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::testing::loss_on;
using engine::testing::run_threads;
using engine::testing::small_mlp;

namespace {

std::vector<float> flat(Module& m) {
  std::vector<float> out;
  for (auto& p : m.parameters())
    for (float v : p.data().to_vector<float>()) out.push_back(v);
  return out;
}

std::unique_ptr<Optimizer> unsharded(ZeroOptimizer kind, std::vector<Variable> params) {
  if (kind == ZeroOptimizer::SGD) return std::make_unique<SGD>(params, SGDOptions{.lr = 0.1, .momentum = 0.9});
  return std::make_unique<Adam>(params, AdamOptions{.lr = 0.01});
}
// `steps` training steps of `model` with `zero`, on this rank's batches.
void train_zero(ProcessGroupTCP& g, ZeroRedundancyOptimizer& zero, Module& model, int steps) {
  for (int step = 0; step < steps; ++step) {
    zero.zero_grad();
    loss_on(model, g.rank(), step).backward();
    zero.step();
  }
}
}  // namespace

TEST_CASE("ZeRO-1 equals DDP with an unsharded optimizer; state is split N ways") {
  // paired: PyTorch's usage, ZeRO over a DDP model (DDP averages, ZeRO cuts its shard).
  for (bool paired : {false, true})
    for (ZeroOptimizer kind : {ZeroOptimizer::SGD, ZeroOptimizer::Adam}) {
      for (int world : {2, 3})
        for (bool shm : {true, false}) {
          INFO("optimizer " << (kind == ZeroOptimizer::SGD ? "SGD" : "Adam") << " world " << world
                            << (paired ? ", over DDP" : ", reduce-scatter") << (shm ? ", shared memory" : ", ring"));
          run_threads(
              world,
              [&](ProcessGroupTCP& g) {
                // Reference: DDP + the ordinary optimizer.
                auto ref_model = small_mlp();
                DistributedDataParallel ddp(ref_model, {.group = &g});
                auto ref_opt = unsharded(kind, ddp.parameters());
                // Sharded: plain model, the optimizer reduces and gathers.
                auto model = small_mlp();
                ZeroOptions zo;
                zo.sgd = {.lr = 0.1, .momentum = 0.9};
                zo.adam = {.lr = 0.01};
                zo.group = &g;
                zo.ddp_averages_gradients = paired;
                std::unique_ptr<DistributedDataParallel> wrapped;
                if (paired) wrapped = std::make_unique<DistributedDataParallel>(model, DDPOptions{.group = &g});
                Module& trained = paired ? static_cast<Module&>(*wrapped) : *model;
                ZeroRedundancyOptimizer zero(trained.parameters(), kind, zo);
                for (int step = 0; step < 4; ++step) {
                  // A schedule: the learning rate halves every step, on both optimizers.
                  if (step > 0) ref_opt->set_lr(ref_opt->lr() / 2), zero.set_lr(zero.lr() / 2);
                  ref_opt->zero_grad();
                  loss_on(ddp, g.rank(), step).backward();
                  ref_opt->step();
                  zero.zero_grad();
                  loss_on(trained, g.rank(), step).backward();
                  const uint64_t before = g.bytes_sent();
                  zero.step();
                  // On the wire, the step's own collectives (ring): an all-gather of the shards, and
                  // unless DDP averaged already, a reduce-scatter too; each (n-1) shards of floats.
                  // In shared memory (every rank on this machine), nothing goes on a socket.
                  const uint64_t sent = g.bytes_sent() - before, shard_bytes = (73 + world - 1) / world * 4;
                  const uint64_t messages = (paired ? 1 : 2) * uint64_t(world - 1), expected = messages * shard_bytes;
                  RANK_REQUIRE(sent >= (shm ? 0 : expected));
                  RANK_REQUIRE(sent <= (shm ? 0 : expected + messages * 48));  // + a 48-byte header per message
                }
                const auto a = flat(*ref_model), b = flat(*model);
                for (size_t i = 0; i < a.size(); ++i) RANK_REQUIRE(b[i] == Approx(a[i]).epsilon(1e-6).margin(1e-7));
                // Optimizer state bytes: this rank holds its shard only.
                size_t full = 0;
                for (auto& [key, t] : ref_opt->state_dict())
                  if (key.rfind("state.", 0) == 0 && t.dim() > 0) full += size_t(t.numel()) * 4;
                const size_t shard = zero.state_bytes(), per_rank = (full + world - 1) / world;
                RANK_REQUIRE(shard <= per_rank + 8 * 4 + 8);  // + padding of the last shard, + Adam's step counter
                RANK_REQUIRE(shard + 8 * 4 >= per_rank);
                // Consolidate on rank 0: the unsharded optimizer's state, key for key.
                const StateDict full_state = zero.consolidate_state_dict(0);
                if (g.rank() == 0) {
                  const StateDict ref_state = ref_opt->state_dict();
                  RANK_REQUIRE(full_state.size() == ref_state.size());
                  for (auto& [key, t] : ref_state) {
                    INFO(key);
                    RANK_REQUIRE(full_state.count(key) == 1);
                    RANK_REQUIRE(full_state.at(key).shape() == t.shape());
                    RANK_REQUIRE(max(abs(full_state.at(key).to(DType::Float32) - t.to(DType::Float32))).item() < 1e-5);
                  }
                } else {
                  RANK_REQUIRE(full_state.empty());
                }
              },
              std::chrono::seconds(20), shm);
        }
    }
}

TEST_CASE(
    "ZeRO's clip_grad_norm_ equals DDP with nn::clip_grad_norm_; nn's own is refused where .grad is not averaged") {
  // In the reduce-scatter design a rank's .grad is its own gradient until step() averages
  // it: nn::clip_grad_norm_ over it would clip each rank by its own norm, a result no
  // single process gives. opt.clip_grad_norm_ clips by the averaged gradient's norm.
  for (bool paired : {false, true})
    for (double norm_type : {1.0, 2.0, kInfNorm})
      for (int world : {2, 3}) {
        INFO((paired ? "over DDP" : "reduce-scatter") << ", norm " << norm_type << ", world " << world);
        run_threads(world, [&](ProcessGroupTCP& g) {
          auto ref_model = small_mlp();
          DistributedDataParallel ddp(ref_model, {.group = &g});
          SGD ref_opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
          auto model = small_mlp();
          std::unique_ptr<DistributedDataParallel> wrapped;
          if (paired) wrapped = std::make_unique<DistributedDataParallel>(model, DDPOptions{.group = &g});
          Module& trained = paired ? static_cast<Module&>(*wrapped) : *model;
          ZeroRedundancyOptimizer zero(
              trained.parameters(), ZeroOptimizer::SGD,
              {.sgd = {.lr = 0.1, .momentum = 0.9}, .adam = {}, .group = &g, .ddp_averages_gradients = paired});
          const double max_norm = std::isinf(norm_type) ? 0.1 : 0.3;
          int clipped = 0;
          for (int step = 0; step < 4; ++step) {
            ref_opt.zero_grad();
            loss_on(ddp, g.rank(), step).backward();
            const double want = clip_grad_norm_(ddp.parameters(), max_norm, norm_type);
            ref_opt.step();
            zero.zero_grad();
            loss_on(trained, g.rank(), step).backward();
            const double got = zero.clip_grad_norm_(max_norm, norm_type);
            zero.step();
            RANK_REQUIRE(got == Approx(want).epsilon(1e-5));
            clipped += want > max_norm;
          }
          RANK_REQUIRE(clipped >= 3);  // the clipping acted: without it the weights differ
          const auto a = flat(*ref_model), b = flat(*model);
          for (size_t i = 0; i < a.size(); ++i) RANK_REQUIRE(b[i] == Approx(a[i]).epsilon(1e-5).margin(1e-6));
          if (!paired) {
            RANK_REQUIRE_THROWS_WITH(clip_grad_norm_(model->parameters(), 1.0),
                                     Catch::Contains("[clip_grad_norm_] parameter 0 is trained through another one") &&
                                         Catch::Contains("opt.clip_grad_norm_(max_norm)"));
            RANK_REQUIRE_THROWS_WITH(SGD(model->parameters(), {.lr = 0.1}),
                                     Catch::Contains("ZeroRedundancyOptimizer that averages the gradients"));
          }
        });
      }
  run_threads(2, [](ProcessGroupTCP& g) {
    auto model = small_mlp();
    {
      ZeroRedundancyOptimizer zero(model->parameters(), ZeroOptimizer::SGD, {.sgd = {}, .adam = {}, .group = &g});
      RANK_REQUIRE_THROWS_WITH(
          ZeroRedundancyOptimizer(model->parameters(), ZeroOptimizer::SGD, {.sgd = {}, .adam = {}, .group = &g}),
          Catch::Contains("[ZeroRedundancyOptimizer] parameter 0 is trained through another one"));
      RANK_REQUIRE_THROWS_WITH(zero.clip_grad_norm_(-1), Catch::Contains("max_norm must be >= 0, got -1"));
      RANK_REQUIRE_THROWS_WITH(zero.set_lr(NAN), Catch::Contains("learning rate must be in [0, 1e+06], got nan"));
    }
    SGD after(model->parameters(), {.lr = 0.1});  // a destroyed ZeRO optimizer lets its parameters go
  });
}

TEST_CASE(
    "ZeRO steps through a GradScaler (and clips) as DDP with an unsharded optimizer: the same skipped steps and "
    "scale") {
  // At step 1 rank 1's loss overflows (an Inf only in its own gradient). Under DDP the
  // averaged gradient is Inf on every rank, so all skip. In ZeRO's reduce-scatter design
  // rank 0's own gradient is finite: the ranks must agree, or rank 0 would step (and
  // reduce-scatter) alone.
  for (bool paired : {false, true}) {
    INFO((paired ? "over DDP" : "reduce-scatter"));
    run_threads(2, [&](ProcessGroupTCP& g) {
      const auto loss_at = [&](Module& m, int step) {
        Variable loss = loss_on(m, g.rank(), step);
        return step == 1 && g.rank() == 1 ? loss * 1e36 : loss;
      };
      const GradScalerOptions so{.init_scale = 1024, .growth_factor = 2, .backoff_factor = 0.5, .growth_interval = 2};
      auto ref_model = small_mlp();
      DistributedDataParallel ddp(ref_model, {.group = &g});
      Adam ref_opt(ddp.parameters(), {.lr = 0.01});
      GradScaler ref_scaler(so);
      auto model = small_mlp();
      std::unique_ptr<DistributedDataParallel> wrapped;
      if (paired) wrapped = std::make_unique<DistributedDataParallel>(model, DDPOptions{.group = &g});
      Module& trained = paired ? static_cast<Module&>(*wrapped) : *model;
      ZeroRedundancyOptimizer zero(trained.parameters(), ZeroOptimizer::Adam,
                                   {.sgd = {}, .adam = {.lr = 0.01}, .group = &g, .ddp_averages_gradients = paired});
      GradScaler scaler(so);
      for (int step = 0; step < 6; ++step) {
        ref_opt.zero_grad();
        ref_scaler.scale(loss_at(ddp, step)).backward();
        ref_scaler.unscale_(ref_opt);  // PyTorch's recipe: unscale, clip, step, update
        clip_grad_norm_(ddp.parameters(), 0.3);
        const bool ref_stepped = ref_scaler.step(ref_opt);
        ref_scaler.update();
        zero.zero_grad();
        scaler.scale(loss_at(trained, step)).backward();
        scaler.unscale_(zero);
        zero.clip_grad_norm_(0.3);
        const bool stepped = scaler.step(zero);
        scaler.update();
        RANK_REQUIRE(stepped == ref_stepped);
        RANK_REQUIRE(scaler.get_scale() == ref_scaler.get_scale());
      }
      RANK_REQUIRE(scaler.skipped_steps() == 1);
      RANK_REQUIRE(scaler.get_scale() == 2048);  // 1024 halved at step 1, doubled after steps 3 and 5
      const auto a = flat(*ref_model), b = flat(*model);
      for (size_t i = 0; i < a.size(); ++i) RANK_REQUIRE(b[i] == Approx(a[i]).epsilon(1e-5).margin(1e-6));
    });
  }
}

TEST_CASE("a frozen layer is not moved by ZeRO's flat shard (weight decay, momentum), as torch.optim leaves it") {
  // The first layer frozen; weight decay would shrink it and momentum carry it if ZeRO
  // stepped it like the rest. Reference: DDP (which leaves it out) and the unsharded optimizer.
  auto freeze_first = [](std::shared_ptr<Sequential> m) {
    m->parameters()[0].set_requires_grad(false);
    m->parameters()[1].set_requires_grad(false);
    return m;
  };
  for (ZeroOptimizer kind : {ZeroOptimizer::SGD, ZeroOptimizer::Adam}) {
    INFO((kind == ZeroOptimizer::SGD ? "SGD" : "Adam with L2 weight decay"));
    run_threads(2, [&](ProcessGroupTCP& g) {
      ZeroOptions zo;
      zo.sgd = {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.1};
      zo.adam = {.lr = 0.01, .weight_decay = 0.1};
      zo.group = &g;
      auto ref_model = freeze_first(small_mlp());
      DistributedDataParallel ddp(ref_model, {.group = &g});
      std::unique_ptr<Optimizer> ref_opt;
      if (kind == ZeroOptimizer::SGD)
        ref_opt = std::make_unique<SGD>(ddp.parameters(), zo.sgd);
      else
        ref_opt = std::make_unique<Adam>(ddp.parameters(), zo.adam);
      auto model = freeze_first(small_mlp());
      const std::vector<float> frozen = model->parameters()[0].data().to_vector<float>();
      ZeroRedundancyOptimizer zero(model->parameters(), kind, zo);
      for (int step = 0; step < 3; ++step) {
        ref_opt->zero_grad();
        loss_on(ddp, g.rank(), step).backward();
        ref_opt->step();
        zero.zero_grad();
        loss_on(*model, g.rank(), step).backward();
        zero.step();
      }
      RANK_REQUIRE(model->parameters()[0].data().to_vector<float>() == frozen);
      const auto a = flat(*ref_model), b = flat(*model);
      for (size_t i = 0; i < a.size(); ++i) RANK_REQUIRE(b[i] == Approx(a[i]).epsilon(1e-6).margin(1e-7));
    });
  }
}

TEST_CASE("a consolidated ZeRO state loads back sharded and training continues identically") {
  run_threads(2, [](ProcessGroupTCP& g) {
    ZeroOptions zo;
    zo.adam = {.lr = 0.01};
    zo.group = &g;
    auto model = small_mlp();
    ZeroRedundancyOptimizer zero(model->parameters(), ZeroOptimizer::Adam, zo);
    train_zero(g, zero, *model, 2);
    // Every rank needs the full state to load: rank 0 gathers it, then it is shared.
    StateDict full = zero.consolidate_state_dict(0);
    static std::mutex mu;
    static StateDict shared;
    if (g.rank() == 0) {
      std::lock_guard<std::mutex> lock(mu);
      shared = full;
    }
    g.barrier().wait();
    StateDict copy;
    {
      std::lock_guard<std::mutex> lock(mu);
      for (auto& [k, t] : shared) copy[k] = t.clone();
    }
    auto model2 = small_mlp();
    model2->load_state_dict(model->state_dict());
    ZeroRedundancyOptimizer zero2(model2->parameters(), ZeroOptimizer::Adam, zo);
    zero2.load_state_dict(copy);
    for (int step = 2; step < 4; ++step) {
      zero.zero_grad();
      loss_on(*model, g.rank(), step).backward();
      zero.step();
      zero2.zero_grad();
      loss_on(*model2, g.rank(), step).backward();
      zero2.step();
    }
    RANK_REQUIRE(flat(*model2) == flat(*model));
  });
}

TEST_CASE("a ZeRO state that is partial, malformed, or another rank's empty one is refused by name, changing nothing") {
  run_threads(2, [](ProcessGroupTCP& g) {
    ZeroOptions zo;
    zo.adam = {.lr = 0.01};
    zo.group = &g;
    auto model = small_mlp();
    ZeroRedundancyOptimizer zero(model->parameters(), ZeroOptimizer::Adam, zo);
    train_zero(g, zero, *model, 2);
    RANK_REQUIRE_THROWS_WITH(zero.consolidate_state_dict(2), Catch::Contains("there is no such rank in a group of 2"));
    const StateDict full = zero.consolidate_state_dict(0);
    // Rank 1's consolidated state is empty: loading it (instead of the file rank 0 saved)
    // used to fail in Adam with "missing key param_groups.0.beta1".
    if (g.rank() == 1)
      RANK_REQUIRE_THROWS_WITH(zero.load_state_dict(full), Catch::Contains("consolidate_state_dict(to) returns the "
                                                                           "full state on rank `to` only"));
    const auto refused = [&](const std::function<void(StateDict&)>& edit, const std::string& why) {
      if (g.rank() != 0) return;  // rank 0 holds the full state
      StateDict bad = full;
      edit(bad);
      RANK_REQUIRE_THROWS_WITH(zero.load_state_dict(bad), Catch::Contains(why));
    };
    // A parameter without its exp_avg: its elements would have started from zero, silently.
    refused([](StateDict& s) { s.erase("state.1.exp_avg"); },
            "has \"state.1.exp_avg_sq\" but not \"state.1.exp_avg\", which parameter 0 has");
    refused([](StateDict& s) { s["state.1.step"] = from_vector(std::vector<int64_t>{7}).reshape({}); },
            "the state's \"step\" differs between parameters");
    refused([](StateDict& s) { s["state.x.exp_avg"] = zeros({3}); },  // was std::stoul's "stoul"
            "the parameter of key \"state.x.exp_avg\": expected an integer");
    refused([](StateDict& s) { s["momentum"] = zeros({3}); }, "key \"momentum\" is neither param_groups");
    // Nothing was changed by the refusals: the state consolidates as before (a collective).
    const StateDict after = zero.consolidate_state_dict(0);
    if (g.rank() != 0) return;
    RANK_REQUIRE(after.size() == full.size());
    for (const auto& [key, t] : full) RANK_REQUIRE(after.at(key).to_vector<float>() == t.to_vector<float>());
  });
}

TEST_CASE("a ZeRO state consolidated at world size 2 re-shards at world size 3 and 1, and training goes on as DDP's") {
  // World 2: train two steps, consolidate the state on rank 0.
  static StateDict saved_state, saved_model;
  run_threads(2, [](ProcessGroupTCP& g) {
    ZeroOptions zo;
    zo.adam = {.lr = 0.01};
    zo.group = &g;
    auto model = small_mlp();
    ZeroRedundancyOptimizer zero(model->parameters(), ZeroOptimizer::Adam, zo);
    train_zero(g, zero, *model, 2);
    StateDict full = zero.consolidate_state_dict(0);
    if (g.rank() == 0) saved_state = full, saved_model = model->state_dict();
  });
  for (int world : {3, 1}) {
    INFO("resumed at world size " << world);
    run_threads(world, [](ProcessGroupTCP& g) {
      auto clone = [](const StateDict& s) {
        StateDict c;
        for (auto& [k, t] : s) c[k] = t.clone();
        return c;
      };
      ZeroOptions zo;
      zo.adam = {.lr = 0.01};
      zo.group = &g;
      auto model = small_mlp();
      model->load_state_dict(clone(saved_model));
      ZeroRedundancyOptimizer zero(model->parameters(), ZeroOptimizer::Adam, zo);
      zero.load_state_dict(clone(saved_state));  // every rank keeps its shard of the new layout
      // Re-sharding loses nothing: consolidating again gives back the saved state.
      const StateDict again = zero.consolidate_state_dict(0);
      if (g.rank() == 0)
        for (auto& [k, t] : saved_state)
          RANK_REQUIRE(again.at(k).to_vector<float>() == t.to(DType::Float32).to_vector<float>());
      // Reference: DDP with an unsharded Adam loaded with the same full state.
      auto ref_model = small_mlp();
      ref_model->load_state_dict(clone(saved_model));
      DistributedDataParallel ddp(ref_model, {.group = &g});
      Adam ref_opt(ddp.parameters(), {.lr = 0.01});
      ref_opt.load_state_dict(clone(saved_state));
      for (int step = 2; step < 4; ++step) {
        ref_opt.zero_grad();
        loss_on(ddp, g.rank(), step).backward();
        ref_opt.step();
        zero.zero_grad();
        loss_on(*model, g.rank(), step).backward();
        zero.step();
      }
      const auto a = flat(*ref_model), b = flat(*model);
      for (size_t i = 0; i < a.size(); ++i) RANK_REQUIRE(b[i] == Approx(a[i]).epsilon(1e-6).margin(1e-7));
    });
  }
}

TEST_CASE("ZeRO refuses the parameter lists any optimizer refuses: empty, repeated, computed") {
  // Each was accepted: a repeated tensor was flattened twice (its state held twice), and a
  // computed one had its values overwritten by the all-gather while its leaves never moved.
  run_threads(2, [](ProcessGroupTCP& g) {
    const ZeroOptions zo{.sgd = {.lr = 0.1}, .adam = {}, .group = &g};
    Variable w(ones({3}), true);
    RANK_REQUIRE_THROWS_WITH(ZeroRedundancyOptimizer({}, ZeroOptimizer::SGD, zo),
                             Catch::Contains("[ZeroRedundancyOptimizer] got an empty parameter list"));
    RANK_REQUIRE_THROWS_WITH(ZeroRedundancyOptimizer({w, w}, ZeroOptimizer::SGD, zo),
                             Catch::Contains("[ZeroRedundancyOptimizer] parameter 1 is parameter 0 again"));
    RANK_REQUIRE_THROWS_WITH(
        ZeroRedundancyOptimizer({w * 2.0}, ZeroOptimizer::SGD, zo),
        Catch::Contains("[ZeroRedundancyOptimizer] parameter 0 is not a leaf: it was computed by mul"));
  });
}

TEST_CASE("an optimizer made over the model before ZeRO's reduce-scatter design took it is refused at its step") {
  // It would step the parameters with this rank's own gradient, beside ZeRO's averaged step.
  run_threads(2, [](ProcessGroupTCP& g) {
    auto model = testing::small_mlp();
    SGD early(model->parameters(), {.lr = 0.1});
    ZeroRedundancyOptimizer opt(model->parameters(), ZeroOptimizer::SGD, {.sgd = {.lr = 0.1}, .adam = {}, .group = &g});
    testing::loss_on(*model, g.rank(), 0).backward();
    RANK_REQUIRE_THROWS_WITH(early.step(), Catch::Contains("[SGD.step] parameter 0 is trained through another one "
                                                           "since this optimizer was made: it is in a "
                                                           "ZeroRedundancyOptimizer"));
  });
}

TEST_CASE("parameters that differ between ranks are named before anything is sharded") {
  std::vector<std::string> errors(2);
  run_threads(2, [&](ProcessGroupTCP& g) {  // (3,2) and (2,3): 6 elements each
    nn::Variable w(zeros({g.rank() ? 3 : 2, g.rank() ? 2 : 3}), true);
    try {
      ZeroRedundancyOptimizer opt({w}, ZeroOptimizer::SGD, {.sgd = {}, .adam = {}, .group = &g});
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  RANK_REQUIRE_THAT(errors[1], Catch::Contains("[ZeroRedundancyOptimizer] the model differs between ranks: "
                                               "parameter \"#0\" has shape (3,2) on rank 1"));
}
