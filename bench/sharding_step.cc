// DDP, ZeRO-1, ZeRO-2 (FSDP SHARD_GRAD_OP) and ZeRO-3 (FSDP FULL_SHARD) side by side: step
// time and the bytes each rank holds for parameters, gradients and Adam's state, on an MLP
// with Adam, batch 64 per rank, one thread per rank.
//
//   bazel run //bench:sharding_step -- --world 2                     # MLP 784-256-256-10
//   bazel run //bench:sharding_step -- --world 2 --hidden 1024 --layers 4
//
// Bytes are counted from the tensors each holds at its peak, the end of backward: DDP and
// ZeRO-1 every parameter and gradient (ZeRO-1 1/n of the state); FSDP its shards, the
// unsharded parameters it had gathered at most at once, its gradients at most at once
// (FSDPMemory), and the optimizer's state over the shards.
#include <chrono>
#include <cstdio>
#include <exception>
#include <functional>
#include <string>
#include <vector>

#include "bench/fork_ranks.h"
#include "bench/median.h"
#include "dist/ddp.h"
#include "dist/fsdp.h"
#include "dist/tcp_group.h"
#include "dist/zero.h"
#include "nn/adam.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;
using Seconds = std::chrono::duration<double>;

namespace {

std::shared_ptr<Sequential> mlp(int hidden, int layers) {
  manual_seed(0);
  std::vector<ModulePtr> m{std::make_shared<Linear>(784, hidden), std::make_shared<ReLU>()};
  for (int i = 1; i < layers; ++i)
    m.push_back(std::make_shared<Linear>(hidden, hidden)), m.push_back(std::make_shared<ReLU>());
  m.push_back(std::make_shared<Linear>(hidden, 10));
  return std::make_shared<Sequential>(m);
}

size_t state_bytes(const Optimizer& opt) {
  size_t b = 0;
  for (auto& [k, t] : opt.state_dict())
    if (k.rfind("state.", 0) == 0) b += t.nbytes();
  return b;
}

size_t bytes_of(const std::vector<Variable>& ps, bool grads) {
  size_t b = 0;
  for (auto& p : ps) b += grads ? (p.grad().defined() ? p.grad().nbytes() : 0) : p.data().nbytes();
  return b;
}

struct Row {
  std::string name;
  double ms = 0;
  size_t params = 0, grads = 0, state = 0;
};

void run_rank(int rank, int world, int port, int steps, int rounds, int hidden, int layers) {
  dist::StoreOptions so;
  so.timeout = std::chrono::seconds(120);
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", port, rank == 0, so);
  dist::TCPGroupOptions go;
  go.timeout = std::chrono::seconds(120);
  dist::ProcessGroupTCP g(store, rank, world, go);
  manual_seed(uint64_t(rank) + 1);
  const Tensor x = randn({64, 784}), y = randint(0, 10, {64});
  auto time_steps = [&](const std::function<void()>& step) {
    for (int i = 0; i < 5; ++i) step();
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
      g.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      t.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / steps);
    }
    return 1e3 * median(t);
  };
  std::vector<Row> rows;
  {  // DDP with an unsharded Adam.
    auto m = mlp(hidden, layers);
    dist::DistributedDataParallel ddp(m, {.group = &g});
    Adam adam(ddp.parameters(), {.lr = 1e-3});
    Row r;
    r.name = "DDP";
    r.ms = time_steps([&] {
      adam.zero_grad();
      cross_entropy(ddp(Variable(x)), y).backward();
      r.grads = std::max(r.grads, bytes_of(ddp.parameters(), true));
      adam.step();
    });
    r.params = bytes_of(ddp.parameters(), false), r.state = state_bytes(adam);
    rows.push_back(r);
  }
  {  // ZeRO-1: a plain model; the optimizer reduce-scatters and all-gathers.
    auto m = mlp(hidden, layers);
    dist::ZeroOptions zo;
    zo.adam = {.lr = 1e-3};
    zo.group = &g;
    dist::ZeroRedundancyOptimizer zero(m->parameters(), dist::ZeroOptimizer::Adam, zo);
    Row r;
    r.name = "ZeRO-1";
    r.ms = time_steps([&] {
      zero.zero_grad();
      cross_entropy((*m)(Variable(x)), y).backward();
      r.grads = std::max(r.grads, bytes_of(m->parameters(), true));
      zero.step();
    });
    r.params = bytes_of(m->parameters(), false), r.state = zero.state_bytes();
    rows.push_back(r);
  }
  for (auto s : {dist::ShardingStrategy::SHARD_GRAD_OP, dist::ShardingStrategy::FULL_SHARD}) {
    dist::FullyShardedDataParallel fsdp(mlp(hidden, layers), {.sharding_strategy = s, .group = &g});
    Adam adam(fsdp.parameters(), {.lr = 1e-3});
    Row r;
    r.name = s == dist::ShardingStrategy::FULL_SHARD ? "ZeRO-3 (FULL_SHARD)" : "ZeRO-2 (SHARD_GRAD_OP)";
    fsdp.reset_peak_memory();
    r.ms = time_steps([&] {
      adam.zero_grad();
      cross_entropy(fsdp(Variable(x)), y).backward();
      adam.step();
    });
    const dist::FSDPMemory mem = fsdp.memory();
    r.params = mem.sharded_params + mem.full_params_peak, r.grads = mem.grads_peak, r.state = state_bytes(adam);
    rows.push_back(r);
  }
  if (rank == 0)
    for (const Row& r : rows) {
      std::printf(
          "{\"bench\": \"sharding_step\", \"world\": %d, \"hidden\": %d, \"layers\": %d, \"strategy\": \"%s\", "
          "\"step_ms\": %.4f, \"param_bytes\": %zu, \"grad_bytes\": %zu, \"adam_state_bytes\": %zu, "
          "\"total_bytes\": %zu}\n",
          world, hidden, layers, r.name.c_str(), r.ms, r.params, r.grads, r.state, r.params + r.grads + r.state);
      std::fflush(stdout);
    }
}

}  // namespace

int main(int argc, char** argv) try {
  int world = 2, steps = 30, rounds = 5, hidden = 256, layers = 2;
  engine::Flags flags("sharding_step", "Times DDP, ZeRO-1, ZeRO-2 and ZeRO-3 steps and counts their bytes per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--steps", &steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.add("--hidden", &hidden, 1, 1 << 16, "width of the hidden layers");
  flags.add("--layers", &layers, 1, 64, "hidden layers");
  flags.parse_or_exit(argc, argv);
  return fork_ranks(world, [&](int r, int port) { run_rank(r, world, port, steps, rounds, hidden, layers); });
} catch (const std::exception& e) {  // a failed allocation, say: said, not an abort
  std::fprintf(stderr, "sharding_step: %s\n", e.what());
  return 1;
}
