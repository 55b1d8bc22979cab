// FullyShardedDataParallel: every strategy trains to DDP's weights; the bytes on the wire
// per step are the formulas' (3, 2 and 2 times (n-1)/n of the parameters' bytes); each rank
// holds 1/n of the parameters between steps; the full state dict is DDP's; a sharded state
// saved and loaded continues identically.
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "dist/fsdp.h"
#include "dist/sharded_grad_scaler.h"
#include "nn/adam.h"
#include "nn/clip_grad.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/dist/small_mlp.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::testing::loss_on;
using engine::testing::run_threads;
using engine::testing::run_threads_with;
using engine::testing::small_mlp;

namespace {

double max_rel_diff(const StateDict& a, const StateDict& b) {
  double worst = 0;
  for (auto& [k, t] : a) {
    const Tensor& u = b.at(k);
    const double scale = std::max(1e-3, max(abs(u)).item());
    worst = std::max(worst, max(abs(t - u)).item() / scale);
  }
  return worst;
}

const ShardingStrategy kAll[] = {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP,
                                 ShardingStrategy::NO_SHARD};
}  // namespace

TEST_CASE("every strategy trains to DDP's weights (SGD with momentum, and Adam)") {
  for (ShardingStrategy s : kAll)
    for (bool adam : {false, true})
      for (int world : {1, 2, 3}) {
        INFO(sharding_strategy_name(s) << (adam ? " Adam" : " SGD") << " world " << world);
        std::vector<double> diff(static_cast<size_t>(world), 1);
        std::vector<size_t> keys(static_cast<size_t>(world));
        run_threads(world, [&](ProcessGroupTCP& g) {
          auto ref = small_mlp();
          DistributedDataParallel ddp(ref, {.group = &g});
          FullyShardedDataParallel fsdp(small_mlp(), {.sharding_strategy = s, .group = &g});
          std::unique_ptr<Optimizer> o1, o2;
          if (adam) {
            o1 = std::make_unique<Adam>(ddp.parameters(), AdamOptions{.lr = 0.01});
            o2 = std::make_unique<Adam>(fsdp.parameters(), AdamOptions{.lr = 0.01});
          } else {
            o1 = std::make_unique<SGD>(ddp.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
            o2 = std::make_unique<SGD>(fsdp.parameters(), SGDOptions{.lr = 0.1, .momentum = 0.9});
          }
          for (int step = 0; step < 4; ++step) {
            o1->zero_grad();
            loss_on(ddp, g.rank(), step).backward();
            o1->step();
            o2->zero_grad();
            loss_on(fsdp, g.rank(), step).backward();
            o2->step();
          }
          const StateDict full = fsdp.full_state_dict(/*rank0_only=*/false);
          keys[size_t(g.rank())] = full.size();
          diff[size_t(g.rank())] = max_rel_diff(full, ref->state_dict());
        });
        for (int r = 0; r < world; ++r) {
          CHECK(keys[size_t(r)] == 4);  // 0.weight, 0.bias, 2.weight, 2.bias
          CHECK(diff[size_t(r)] < 1e-5);
        }
      }
}

TEST_CASE("FSDP's clip_grad_norm_ takes the whole model's norm over the shards: DDP's clipped training") {
  for (ShardingStrategy s : kAll)
    for (double p : {2.0, kInfNorm})
      for (int world : {1, 2, 3}) {
        INFO(sharding_strategy_name(s) << " norm " << p << " world " << world);
        std::vector<double> diff(size_t(world), 1), norm_diff(size_t(world), 1);
        std::vector<int> clipped(size_t(world), 0);
        run_threads(world, [&](ProcessGroupTCP& g) {
          auto ref = small_mlp();
          DistributedDataParallel ddp(ref, {.group = &g});
          FullyShardedDataParallel fsdp(small_mlp(), {.sharding_strategy = s, .group = &g});
          SGD o1(ddp.parameters(), {.lr = 0.1, .momentum = 0.9}), o2(fsdp.parameters(), {.lr = 0.1, .momentum = 0.9});
          const double max_norm = p == 2 ? 0.05 : 0.01;  // below the gradients' norms: every step clips
          for (int step = 0; step < 4; ++step) {
            o1.zero_grad();
            loss_on(ddp, g.rank(), step).backward();
            const double want = clip_grad_norm_(ddp.parameters(), max_norm, p);
            o1.step();
            o2.zero_grad();
            loss_on(fsdp, g.rank(), step).backward();
            const double got = fsdp.clip_grad_norm_(max_norm, p);
            o2.step();
            norm_diff[size_t(g.rank())] = std::abs(got - want) / want;
            clipped[size_t(g.rank())] += want > max_norm;
          }
          diff[size_t(g.rank())] = max_rel_diff(fsdp.full_state_dict(false), ref->state_dict());
        });
        for (int r = 0; r < world; ++r) {
          CHECK(clipped[size_t(r)] == 4);
          CHECK(norm_diff[size_t(r)] < 1e-6);
          CHECK(diff[size_t(r)] < 1e-5);
        }
      }
}

TEST_CASE("HYBRID_SHARD on 2 machines x 2 ranks trains to DDP's weights, clipped by the whole norm") {
  std::vector<double> diff(4, 1), norm_diff(4, 0);
  run_threads_with(
      4, [](int rank, TCPGroupOptions& o) { o.host_id = rank < 2 ? "machine-a" : "machine-b"; },
      [&](ProcessGroupTCP& g) {
        auto ref = small_mlp();
        DistributedDataParallel ddp(ref, {.group = &g});
        FullyShardedDataParallel fsdp(small_mlp(), {.sharding_strategy = ShardingStrategy::HYBRID_SHARD, .group = &g});
        SGD o1(ddp.parameters(), {.lr = 0.1, .momentum = 0.9}), o2(fsdp.parameters(), {.lr = 0.1, .momentum = 0.9});
        // Sharded within a machine: each rank holds half of each unit (49 -> 25, 24 -> 12).
        RANK_REQUIRE(fsdp.memory().sharded_params == (25 + 12) * 4);
        for (int step = 0; step < 3; ++step) {
          o1.zero_grad();
          loss_on(ddp, g.rank(), step).backward();
          const double want = clip_grad_norm_(ddp.parameters(), 0.05);  // clipped too: the norm's parts
          o1.step();                                                    // are added within a machine
          o2.zero_grad();
          loss_on(fsdp, g.rank(), step).backward();
          const double got = fsdp.clip_grad_norm_(0.05);
          o2.step();
          norm_diff[size_t(g.rank())] = std::max(norm_diff[size_t(g.rank())], std::abs(got - want) / want);
        }
        diff[size_t(g.rank())] = max_rel_diff(fsdp.full_state_dict(false), ref->state_dict());
      });
  for (double d : diff) CHECK(d < 1e-5);
  for (double d : norm_diff) CHECK(d < 1e-6);
}

TEST_CASE("bytes on the wire per step: FULL_SHARD 3, SHARD_GRAD_OP 2, NO_SHARD 2 times (n-1)/n of the parameters") {
  for (ShardingStrategy s : kAll)
    for (int world : {2, 3}) {
      INFO(sharding_strategy_name(s) << " world " << world);
      std::vector<uint64_t> sent(static_cast<size_t>(world));
      run_threads(
          world,
          [&](ProcessGroupTCP& g) {
            FullyShardedDataParallel fsdp(small_mlp(), {.sharding_strategy = s, .group = &g});
            SGD opt(fsdp.parameters(), {.lr = 0.1});
            loss_on(fsdp, g.rank(), 0).backward();  // a first step, so the next is a steady one
            opt.step();
            opt.zero_grad();
            const uint64_t before = g.bytes_sent();
            loss_on(fsdp, g.rank(), 1).backward();
            opt.step();
            sent[size_t(g.rank())] = g.bytes_sent() - before;
          },
          std::chrono::seconds(20), /*shared_memory=*/false);  // the ring: every byte on a socket
      // Padded units: 49 and 24 parameters, each rounded up to a multiple of the world size.
      const uint64_t padded = uint64_t((49 + world - 1) / world * world + (24 + world - 1) / world * world) * 4;
      const uint64_t unit = padded * uint64_t(world - 1) / uint64_t(world);
      const uint64_t times = s == ShardingStrategy::FULL_SHARD ? 3 : 2;
      const uint64_t dense = uint64_t(49 + 24) * 4 * uint64_t(world - 1) / uint64_t(world);  // NO_SHARD: no padding
      const uint64_t want = s == ShardingStrategy::NO_SHARD ? 2 * dense : times * unit;
      for (int r = 0; r < world; ++r) {
        INFO("rank " << r << " sent " << sent[size_t(r)] << ", the formula " << want);
        CHECK(sent[size_t(r)] >= want);
        CHECK(sent[size_t(r)] <= want + 2 * 3 * uint64_t(world) * 48 + 64);  // headers of each ring step
      }
    }
}

TEST_CASE("memory: 1/n of the parameters held between steps; FULL_SHARD gathers at most two units at once") {
  // Six layers of 32 x 32 (+ bias): six units of 1056 parameters.
  auto deep = [] {
    Generator g(4);
    std::vector<ModulePtr> layers;
    for (int i = 0; i < 6; ++i) layers.push_back(std::make_shared<Linear>(32, 32, true, &g));
    return std::make_shared<Sequential>(layers);
  };
  for (int world : {1, 2, 4}) {
    INFO("world " << world);
    std::vector<FSDPMemory> full(static_cast<size_t>(world)), grad_op(static_cast<size_t>(world));
    run_threads(world, [&](ProcessGroupTCP& g) {
      for (ShardingStrategy s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP}) {
        FullyShardedDataParallel fsdp(deep(), {.sharding_strategy = s, .group = &g});
        fsdp.reset_peak_memory();
        Generator gen(uint64_t(g.rank()));
        sum(fsdp(Variable(randn({8, 32}, &gen)))).backward();
        RANK_REQUIRE(fsdp.memory().full_params_now == 0);  // nothing gathered after backward
        (s == ShardingStrategy::FULL_SHARD ? full : grad_op)[size_t(g.rank())] = fsdp.memory();
      }
    });
    const size_t unit = 1056 * 4, params = 6 * unit;
    for (int r = 0; r < world; ++r) {
      CHECK(full[size_t(r)].sharded_params == params / size_t(world));
      // FULL_SHARD: the unit computing and the next one prefetched, never more.
      CHECK(full[size_t(r)].full_params_peak == std::min<size_t>(2, 6) * unit);
      // Gradients: the unit computing them (born in its flat buffer) and the previous one still
      // reducing, at most; then the shards (1/n).
      CHECK(full[size_t(r)].grads_peak > 0);
      CHECK(full[size_t(r)].grads_peak <= 2 * unit + params / size_t(world));
      // SHARD_GRAD_OP keeps every unit gathered from its forward to its backward.
      CHECK(grad_op[size_t(r)].full_params_peak == params);
    }
  }
}

TEST_CASE("a sharded state saved and loaded continues exactly; evaluation works between steps") {
  std::vector<std::string> problems(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    FullyShardedDataParallel a(small_mlp(), {.group = &g});
    Adam oa(a.parameters(), {.lr = 0.01});
    for (int step = 0; step < 2; ++step) {
      oa.zero_grad();
      loss_on(a, g.rank(), step).backward();
      oa.step();
    }
    {
      autograd::NoGradGuard no_grad;  // evaluation: gathers, computes, releases
      a(Variable(ones({2, 6})));
    }
    const StateDict params = a.sharded_state_dict(), opt = oa.state_dict();
    FullyShardedDataParallel b(small_mlp(), {.group = &g});
    Adam ob(b.parameters(), {.lr = 0.01});
    b.load_sharded_state_dict(params);
    ob.load_state_dict(opt);
    for (int step = 2; step < 4; ++step) {
      oa.zero_grad();
      loss_on(a, g.rank(), step).backward();
      oa.step();
      ob.zero_grad();
      loss_on(b, g.rank(), step).backward();
      ob.step();
    }
    const StateDict fa = a.full_state_dict(false), fb = b.full_state_dict(false);
    for (auto& [k, t] : fa)
      if (max(abs(t - fb.at(k))).item() != 0) problems[size_t(g.rank())] = "differs at " + k;
    // Each bad state is refused with its words; `what` says what was wrongly accepted.
    const auto refused = [&](const StateDict& state, const std::string& words, const std::string& what) {
      try {
        b.load_sharded_state_dict(state);
        problems[size_t(g.rank())] += " / " + what + " was accepted";
      } catch (const Error& e) {
        if (std::string(e.what()).find(words) == std::string::npos)
          problems[size_t(g.rank())] += std::string(" / ") + e.what();
      }
    };
    // Another rank's shards (same shapes, other values) are refused, and change nothing.
    StateDict other = params;
    other["_shard.rank"] = scalar_tensor(double(1 - g.rank()), DType::Int64);
    const StateDict before = b.sharded_state_dict();
    refused(other,
            "holds shard " + std::to_string(1 - g.rank()) + " of 2, but this rank holds shard " +
                std::to_string(g.rank()) + " of 2",
            "another rank's shards");
    for (auto& [k, t] : b.sharded_state_dict())
      if (max(abs(t.to(DType::Float32) - before.at(k).to(DType::Float32))).item() != 0)
        problems[size_t(g.rank())] += " / a refused state changed " + k;
    StateDict unnamed = params;
    unnamed.erase("_shard.count");
    refused(unnamed, "does not say which shard", "a state without its shard count");
    // A shard of another size is refused, naming it.
    StateDict wrong = params;
    for (auto& [k, t] : wrong)
      if (k[0] != '_') {
        t = zeros({3});
        break;
      }
    refused(wrong, "in the sharded state but", "a wrong shape");
  });
  for (auto& p : problems) CHECK(p == "");
}

TEST_CASE("a frozen middle layer: gathered for backward, never reduced or stepped; training equals DDP's") {
  // Linear, ReLU, Linear (frozen), ReLU, Linear: the first layer's gradient flows back
  // through the frozen one, so FSDP must still gather it for backward. Adam with weight
  // decay would move it if it were stepped.
  auto model = [] {
    Generator gen(4);
    auto m = std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Linear>(6, 7, true, &gen), std::make_shared<ReLU>(),
                               std::make_shared<Linear>(7, 7, true, &gen), std::make_shared<ReLU>(),
                               std::make_shared<Linear>(7, 3, true, &gen)});
    for (auto& [name, p] : m->named_parameters())
      if (name.rfind("2.", 0) == 0) p.set_requires_grad(false);
    return m;
  };
  const std::vector<float> frozen = model()->state_dict().at("2.weight").to_vector<float>();
  std::vector<std::pair<ShardingStrategy, int>> cases;
  for (ShardingStrategy s : kAll)
    for (int world : {2, 3}) cases.push_back({s, world});
  cases.push_back({ShardingStrategy::HYBRID_SHARD, 2});  // 2 machines of 1 rank
  for (auto [strategy, world] : cases) {
    INFO(sharding_strategy_name(strategy) << " world " << world);
    std::vector<double> diff(static_cast<size_t>(world), 1);
    std::vector<std::vector<float>> after(static_cast<size_t>(world));
    run_threads(world, [&, strategy = strategy](ProcessGroupTCP& g) {
      auto ref = model();
      DistributedDataParallel ddp(ref, {.group = &g});
      FullyShardedDataParallel fsdp(model(), {.sharding_strategy = strategy, .group = &g, .ranks_per_node = 1});
      const AdamOptions adam{.lr = 0.01, .weight_decay = 0.1};
      Adam o1(ddp.parameters(), adam), o2(fsdp.parameters(), adam);
      for (int step = 0; step < 3; ++step) {
        o1.zero_grad();
        loss_on(ddp, g.rank(), step).backward();
        o1.step();
        o2.zero_grad();
        loss_on(fsdp, g.rank(), step).backward();
        o2.step();
      }
      const StateDict full = fsdp.full_state_dict(/*rank0_only=*/false);
      diff[size_t(g.rank())] = max_rel_diff(full, ref->state_dict());
      after[size_t(g.rank())] = full.at("2.weight").to_vector<float>();
    });
    for (int r = 0; r < world; ++r) {
      CHECK(diff[size_t(r)] < 1e-5);
      CHECK(after[size_t(r)] == frozen);
    }
  }
}

namespace {
// One layer run twice (weight tying inside a child): a 4 -> 4 Linear, a ReLU, the same Linear.
struct Twice : Module {
  Twice() {
    Generator g(1);
    lin = register_module("lin", std::make_shared<Linear>(4, 4, true, &g));
  }
  Variable forward(const Variable& x) override { return (*lin)(relu((*lin)(x))); }
  std::shared_ptr<Linear> lin;
};
Variable loss_of_4(Module& m, int rank, int step) {
  Generator g(uint64_t(10 * step + rank));
  return sum(m(Variable(randn({3, 4}, &g))) * m(Variable(randn({3, 4}, &g))));
}
}  // namespace

TEST_CASE("one layer placed in two children is refused by name; inside one child it trains as DDP's") {
  // Sequential{lin, relu, lin}: both children would make the one weight a view of their own
  // flat buffer. FULL_SHARD failed with "this tensor's memory was released" on one rank and
  // a timeout on the other; NO_SHARD trained silently to other weights (0.12 from DDP's).
  const auto placed_twice = [] {
    Generator g(1);
    auto lin = std::make_shared<Linear>(4, 4, true, &g);
    return std::make_shared<Sequential>(std::vector<ModulePtr>{lin, std::make_shared<ReLU>(), lin});
  };
  for (ShardingStrategy s : kAll) {
    INFO(sharding_strategy_name(s));
    run_threads(2, [&](ProcessGroupTCP& g) {
      auto model = placed_twice();
      RANK_REQUIRE_THROWS_WITH(FullyShardedDataParallel(model, {.sharding_strategy = s, .group = &g}),
                               Catch::Contains("[FSDP] the model's children \"0\" and \"2\" share the parameter "
                                               "\"weight\" (one layer placed twice?)"));
      DistributedDataParallel still_usable(model, {.group = &g});  // nothing was marked or replaced
      auto ref = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Twice>()});
      auto tied = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Twice>()});
      DistributedDataParallel ddp(ref, {.group = &g});
      FullyShardedDataParallel fsdp(tied, {.sharding_strategy = s, .group = &g});
      SGD o1(ddp.parameters(), {.lr = 0.01}), o2(fsdp.parameters(), {.lr = 0.01});
      for (int step = 0; step < 3; ++step) {
        o1.zero_grad();
        loss_of_4(ddp, g.rank(), step).backward();
        o1.step();
        o2.zero_grad();
        loss_of_4(fsdp, g.rank(), step).backward();
        o2.step();
      }
      RANK_REQUIRE(max_rel_diff(fsdp.full_state_dict(/*rank0_only=*/false), ref->state_dict()) < 1e-5);
    });
  }
}

TEST_CASE("ShardedGradScaler: an Inf in one rank's shard skips the step on every rank, and the scales stay equal") {
  // A float16 overflow in a few elements lands, after the reduce-scatter, in one rank's
  // shard. A plain GradScaler per rank stepped the other ranks' shards and halved the
  // scale on that rank only: every later gradient then averaged differently scaled losses.
  std::vector<int> stepped(2);
  std::vector<double> scales(2);
  std::vector<int> unchanged(2);  // not vector<bool>: its bits share a word, and two ranks write
  run_threads(2, [&](ProcessGroupTCP& g) {
    FullyShardedDataParallel fsdp(small_mlp(), {.group = &g});
    SGD opt(fsdp.parameters(), {.lr = 0.1});
    ShardedGradScaler scaler({.init_scale = 1024}, &g);
    const std::vector<float> before = fsdp.parameters()[0].data().to_vector<float>();
    scaler.scale(loss_on(fsdp, g.rank(), 0)).backward();
    if (g.rank() == 1) fsdp.parameters()[0].mutable_grad().narrow(0, 0, 1).fill_(INFINITY);  // rank 1's shard only
    stepped[size_t(g.rank())] = scaler.step(opt);
    scaler.update();
    scales[size_t(g.rank())] = scaler.get_scale();
    unchanged[size_t(g.rank())] = fsdp.parameters()[0].data().to_vector<float>() == before;
    // The next step, finite everywhere, is taken by both.
    opt.zero_grad();
    scaler.scale(loss_on(fsdp, g.rank(), 1)).backward();
    RANK_REQUIRE(scaler.step(opt));
    scaler.update();
  });
  REQUIRE(stepped == std::vector<int>{0, 0});
  REQUIRE(scales == std::vector<double>{512, 512});
  REQUIRE(unchanged == std::vector<int>{1, 1});
}
