// The claims of lesson 2, each able to fail: DDP over N ranks equals one process on the
// combined batch; replicas stay bit-identical; no_sync accumulates; unused parameters are
// named; communication overlaps backward; only rank 0 writes the checkpoint. What DDP
// checks about the model (frozen layers, models that differ, wrapping twice) is in
// ddp_model_checks_test.cc; the DistributedSampler's claims are in
// distributed_sampler_test.cc.
#include <cstdio>
#include <fstream>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ddp_models.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::ddp_testing::Data;
using engine::ddp_testing::flat;
using engine::ddp_testing::mlp;
using engine::testing::run_threads;

namespace {
// k SGD steps of one process on batches of `batch` rows.
std::vector<float> single_process(int steps, int64_t batch) {
  Data d;
  auto model = mlp(1);
  SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < steps; ++s) {
    const int64_t start = (s * batch) % 48;
    opt.zero_grad();
    cross_entropy((*model)(Variable(d.x.narrow(0, start, batch))), d.y.narrow(0, start, batch)).backward();
    opt.step();
  }
  return flat(*model);
}

// How many buckets DDP had launched when the first layer's weight (the last gradient
// backward computes) was ready: its hook is registered before DDP's own, so it runs first.
struct LaunchedAtLastGradient {
  int launched = -1;
  DistributedDataParallel* ddp = nullptr;  // set once DDP is constructed
  explicit LaunchedAtLastGradient(Module& model) {
    model.parameters()[0].register_post_accumulate_grad_hook([this](Variable&) { launched = ddp->buckets_launched(); });
  }
};

}  // namespace

TEST_CASE("DDP over N ranks with batch b equals one process with batch N*b") {
  for (int world : {2, 3}) {
    const int64_t b = 8;
    const std::vector<float> reference = single_process(4, world * b);
    std::vector<std::vector<float>> replicas(static_cast<size_t>(world));
    run_threads(world, [&](ProcessGroupTCP& g) {
      Data d;
      // Different initial weights on purpose: DDP must start everyone from rank 0's.
      DistributedDataParallel ddp(mlp(g.rank() == 0 ? 1 : 100 + g.rank()), {.bucket_cap_mb = 0.0005, .group = &g});
      SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
      for (int s = 0; s < 4; ++s) {
        const int64_t start = (s * world * b) % 48 + g.rank() * b;  // this rank's slice of the big batch
        opt.zero_grad();
        cross_entropy(ddp(Variable(d.x.narrow(0, start, b))), d.y.narrow(0, start, b)).backward();
        opt.step();
      }
      replicas[size_t(g.rank())] = flat(ddp.module());
    });
    for (int r = 0; r < world; ++r) {
      INFO("world " << world << " rank " << r);
      RANK_REQUIRE(replicas[size_t(r)] == replicas[0]);  // bit-identical replicas
      for (size_t i = 0; i < reference.size(); ++i)
        RANK_REQUIRE(replicas[size_t(r)][i] == Approx(reference[i]).epsilon(1e-5).margin(1e-6));
    }
  }
}

TEST_CASE("a layer used twice (tied weights) is one parameter: reduced once, equal to one process") {
  // The same Linear at positions 0 and 2: its weight's gradient sums both uses, and it must be
  // all-reduced once, after both have arrived (as PyTorch's DDP does for shared parameters).
  const auto tied = [](uint64_t seed) {
    Generator g(seed);
    auto shared = std::make_shared<Linear>(6, 6, true, &g);
    return std::make_shared<Sequential>(
        std::vector<ModulePtr>{shared, std::make_shared<ReLU>(), shared, std::make_shared<Linear>(6, 4, true, &g)});
  };
  REQUIRE(tied(1)->parameters().size() == 4);
  REQUIRE(tied(1)->state_dict().size() == 6);  // "0.weight" and "2.weight" both, as PyTorch's
  const auto train = [&](Module& model, std::vector<Variable> params, int world, int rank) {
    Data d;
    SGD opt(std::move(params), {.lr = 0.1, .momentum = 0.9});
    const int64_t b = 24 / world;
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      const int64_t start = (s * 24) % 48 + rank * b;
      cross_entropy(model(Variable(d.x.narrow(0, start, b))), d.y.narrow(0, start, b)).backward();
      opt.step();
    }
  };
  auto alone = tied(1);
  train(*alone, alone->parameters(), 1, 0);
  const std::vector<float> reference = flat(*alone);
  std::vector<std::vector<float>> replicas(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(tied(g.rank() == 0 ? 1 : 9), {.bucket_cap_mb = 0.0001, .group = &g});
    train(ddp, ddp.parameters(), 2, g.rank());
    replicas[size_t(g.rank())] = flat(ddp.module());
  });
  RANK_REQUIRE(replicas[1] == replicas[0]);
  REQUIRE(replicas[0].size() == reference.size());
  for (size_t i = 0; i < reference.size(); ++i)
    RANK_REQUIRE(replicas[0][i] == Approx(reference[i]).epsilon(1e-5).margin(1e-6));
}

TEST_CASE("buckets follow reverse registration order with a small first bucket") {
  run_threads(1, [](ProcessGroupTCP& g) {
    Generator gen(0);
    auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(512, 512, true, &gen),
                                                                     std::make_shared<Linear>(512, 512, true, &gen),
                                                                     std::make_shared<Linear>(512, 10, true, &gen)});
    DistributedDataParallel ddp(model, {.bucket_cap_mb = 1.5, .first_bucket_mb = 0.5, .group = &g});
    const auto& names = ddp.bucket_names();
    RANK_REQUIRE(names.front().front() == "2.bias");  // the last parameter is first
    RANK_REQUIRE(names.back().back() == "0.weight");
    // A bucket closes once it reaches its cap (PyTorch's rule): 2.bias, 2.weight, 1.bias
    // (22 KB) are under 0.5 MiB, 1.weight (1 MiB) takes bucket 0 past it; the rest fit in one.
    RANK_REQUIRE(names.size() == 2);
    RANK_REQUIRE(names[0] == std::vector<std::string>{"2.bias", "2.weight", "1.bias", "1.weight"});
    RANK_REQUIRE(names[1] == std::vector<std::string>{"0.bias", "0.weight"});
    RANK_REQUIRE(ddp.state_dict().count("module.0.weight") == 1);  // PyTorch's names: "module." + the model's
  });
}

TEST_CASE("no_sync accumulates locally; the next synced step equals the large-batch step") {
  const std::vector<float> reference = [] {
    // One process: accumulate the gradients of both halves of each rank's two micro-batches.
    Data d;
    auto model = mlp(1);
    SGD opt(model->parameters(), {.lr = 0.1});
    opt.zero_grad();
    for (int micro = 0; micro < 2; ++micro) {
      Variable loss = cross_entropy((*model)(Variable(d.x.narrow(0, micro * 16, 16))), d.y.narrow(0, micro * 16, 16));
      loss.backward();
    }
    opt.step();
    return flat(*model);
  }();
  std::vector<std::vector<float>> replicas(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    Data d;
    DistributedDataParallel ddp(mlp(1), {.group = &g});
    SGD opt(ddp.parameters(), {.lr = 0.1});
    opt.zero_grad();
    {
      auto no_sync = ddp.no_sync();  // micro-batch 0: local accumulation only
      cross_entropy(ddp(Variable(d.x.narrow(0, 0 * 16 + g.rank() * 8, 8))), d.y.narrow(0, g.rank() * 8, 8)).backward();
      RANK_REQUIRE(ddp.buckets_launched() == 0);
    }
    cross_entropy(ddp(Variable(d.x.narrow(0, 16 + g.rank() * 8, 8))), d.y.narrow(0, 16 + g.rank() * 8, 8)).backward();
    opt.step();
    replicas[size_t(g.rank())] = flat(ddp.module());
  });
  RANK_REQUIRE(replicas[0] == replicas[1]);
  for (size_t i = 0; i < reference.size(); ++i)
    RANK_REQUIRE(replicas[0][i] == Approx(reference[i]).epsilon(1e-5).margin(1e-6));
}

namespace {
// A model with a layer that forward never uses.
struct WithUnused : Module {
  std::shared_ptr<Linear> used, unused;
  WithUnused() {
    Generator g(3);
    used = register_module("used", std::make_shared<Linear>(6, 4, true, &g));
    unused = register_module("unused", std::make_shared<Linear>(6, 4, true, &g));
  }
  Variable forward(const Variable& x) override { return (*used)(x); }
};
}  // namespace

TEST_CASE("an unused parameter is named; find_unused_parameters handles it") {
  std::vector<std::string> errors(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    Data d;
    DistributedDataParallel ddp(std::make_shared<WithUnused>(), {.group = &g});
    try {
      cross_entropy(ddp(Variable(d.x.narrow(0, 0, 8))), d.y.narrow(0, 0, 8)).backward();
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  for (auto& e : errors)
    RANK_REQUIRE_THAT(e, Catch::Contains("received no gradient") && Catch::Contains("unused.weight") &&
                             Catch::Contains("unused.bias") && Catch::Contains("find_unused_parameters"));
  run_threads(2, [&](ProcessGroupTCP& g) {
    Data d;
    DistributedDataParallel ddp(std::make_shared<WithUnused>(), {.find_unused_parameters = true, .group = &g});
    for (int step = 0; step < 2; ++step) {
      ddp.zero_grad();
      cross_entropy(ddp(Variable(d.x.narrow(0, g.rank() * 8, 8))), d.y.narrow(0, g.rank() * 8, 8)).backward();
      auto& m = static_cast<WithUnused&>(ddp.module());
      RANK_REQUIRE(max(abs(m.unused->weight.grad())).item() == 0);
      RANK_REQUIRE(max(abs(m.used->weight.grad())).item() > 0);
    }
  });
}

TEST_CASE("communication overlaps backward: buckets are launched before the last gradient exists") {
  run_threads(2, [](ProcessGroupTCP& g) {
    Data d;
    auto model = mlp(1);
    LaunchedAtLastGradient probe(*model);
    DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.0001, .first_bucket_mb = 0.0001, .group = &g});
    probe.ddp = &ddp;
    RANK_REQUIRE(ddp.bucket_names().size() == 2);  // {2.bias, 2.weight}, {0.bias, 0.weight}
    cross_entropy(ddp(Variable(d.x.narrow(0, 0, 8))), d.y.narrow(0, 0, 8)).backward();
    RANK_REQUIRE(probe.launched == 1);          // the last layer's bucket was in flight while 0.weight was computed
    RANK_REQUIRE(ddp.buckets_launched() == 0);  // all finished and reset by the end of backward
  });
}

TEST_CASE("only rank 0 writes the checkpoint, and every rank loads the same values") {
  std::vector<std::vector<float>> loaded(3);
  const std::string base = tmp_path("ddp_ckpt");
  for (int r = 0; r < 3; ++r) std::remove((base + std::to_string(r) + ".safetensors").c_str());
  std::remove((base + ".safetensors").c_str());
  run_threads(3, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(g.rank() + 10), {.group = &g});
    // Each rank asks to save to its own path: only rank 0's may appear.
    save_on_rank0(base + std::to_string(g.rank()) + ".safetensors", ddp.module().state_dict(), &g);
    save_on_rank0(base + ".safetensors", ddp.module().state_dict(), &g);
    auto fresh = mlp(999);
    fresh->load_state_dict(load_safetensors(base + ".safetensors"));  // after the barrier: complete
    loaded[size_t(g.rank())] = flat(*fresh);
  });
  RANK_REQUIRE(std::ifstream(base + "0.safetensors").good());
  REQUIRE_FALSE(std::ifstream(base + "1.safetensors").good());
  REQUIRE_FALSE(std::ifstream(base + "2.safetensors").good());
  RANK_REQUIRE(loaded[1] == loaded[0]);
  RANK_REQUIRE(loaded[2] == loaded[0]);
}

TEST_CASE("at world size 1 buckets are skipped, unless reduce_when_alone; the result is the same") {
  for (bool alone : {false, true}) {
    INFO("reduce_when_alone " << alone);
    run_threads(1, [&](ProcessGroupTCP& g) {
      Data d;
      auto model = mlp(1);
      LaunchedAtLastGradient probe(*model);
      DistributedDataParallel ddp(
          model, {.bucket_cap_mb = 0.0001, .first_bucket_mb = 0.0001, .reduce_when_alone = alone, .group = &g});
      probe.ddp = &ddp;
      SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
      for (int s = 0; s < 3; ++s) {
        opt.zero_grad();
        cross_entropy(ddp(Variable(d.x.narrow(0, s * 8, 8))), d.y.narrow(0, s * 8, 8)).backward();
        opt.step();
      }
      RANK_REQUIRE(probe.launched == (alone ? 1 : 0));
      RANK_REQUIRE(flat(*model) == single_process(3, 8));
    });
  }
}

TEST_CASE("gradient_as_bucket_view: each .grad lives in its bucket, and training is bit-identical to copies") {
  // Steps with zero_grad, then steps that accumulate into the views, then a no_sync step.
  auto train = [](bool view, std::vector<std::vector<float>>* replicas, bool* adjacent) {
    run_threads(2, [&](ProcessGroupTCP& g) {
      Data d;
      DistributedDataParallel ddp(mlp(1), {.gradient_as_bucket_view = view, .group = &g});
      SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
      for (int s = 0; s < 6; ++s) {
        const int64_t start = s * 8 + g.rank() * 4;
        if (s < 3) opt.zero_grad();  // then three steps that accumulate into .grad
        if (s == 4) {
          auto no_sync = ddp.no_sync();
          cross_entropy(ddp(Variable(d.x.narrow(0, start, 4))), d.y.narrow(0, start, 4)).backward();
        }
        cross_entropy(ddp(Variable(d.x.narrow(0, start, 4))), d.y.narrow(0, start, 4)).backward();
        opt.step();
      }
      // The bucket holds the parameters in reverse order ("2.bias", then "2.weight", ...):
      // with views, 2.weight's gradient starts right where 2.bias's ends.
      auto params = ddp.module().parameters();
      const Tensor& bias = params[3].grad();
      const Tensor& weight = params[2].grad();
      if (g.rank() == 0) *adjacent = weight.data<float>() == bias.data<float>() + bias.numel();
      (*replicas)[size_t(g.rank())] = flat(ddp.module());
    });
  };
  std::vector<std::vector<float>> copies(2), views(2);
  bool adjacent_copies = true, adjacent_views = false;
  train(false, &copies, &adjacent_copies);
  train(true, &views, &adjacent_views);
  REQUIRE(adjacent_views);
  REQUIRE_FALSE(adjacent_copies);
  REQUIRE(views[0] == views[1]);
  REQUIRE(views[0] == copies[0]);  // the same arithmetic, bit for bit
}

TEST_CASE("linear layers compute their weight gradients straight into the bucket; .grad stays private without views") {
  for (bool view : {true, false}) {
    run_threads(2, [&](ProcessGroupTCP& g) {
      Data d;
      DistributedDataParallel ddp(mlp(1), {.gradient_as_bucket_view = view, .group = &g});
      Variable weight = ddp.module().parameters()[0];  // "0.weight"
      const float* born = nullptr;                     // where its gradient was when backward made it
      weight.register_post_accumulate_grad_hook([&](Variable& p) { born = p.grad().data<float>(); });
      const Tensor x = d.x.narrow(0, g.rank() * 4, 4), y = d.y.narrow(0, g.rank() * 4, 4);
      for (int step = 0; step < 2; ++step) {
        ddp.zero_grad();
        cross_entropy(ddp(Variable(x)), y).backward();
      }
      // With views, .grad after backward is the bucket slot: the gradient was born there.
      // Without, .grad is a copy of the average and does not alias the bucket.
      if (view)
        RANK_REQUIRE(weight.grad().data<float>() == born);
      else
        RANK_REQUIRE(weight.grad().data<float>() != born);
    });
  }
}
