// ZeRO stage 1 against plain DDP: optimizer-state bytes per rank and step time, for the
// MLP 784-256-256-10 with Adam, batch 64 per rank, one thread per rank.
//
//   bazel run //bench:zero_step -- --world 2
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/fork_ranks.h"
#include "bench/median.h"
#include "dist/ddp.h"
#include "dist/tcp_group.h"
#include "dist/zero.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;
using Seconds = std::chrono::duration<double>;

namespace {

std::shared_ptr<Sequential> mlp() {
  manual_seed(0);
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
      std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
}

size_t state_bytes(const Optimizer& opt) {
  size_t b = 0;
  for (auto& [k, t] : opt.state_dict())
    if (k.rfind("state.", 0) == 0) b += size_t(t.numel()) * dtype_size(t.dtype());
  return b;
}

void run_rank(int rank, int world, int port, int steps, int rounds) {
  dist::StoreOptions so;
  so.timeout = std::chrono::seconds(60);
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", port, rank == 0, so);
  dist::TCPGroupOptions go;
  go.timeout = std::chrono::seconds(60);
  dist::ProcessGroupTCP g(store, rank, world, go);
  manual_seed(uint64_t(rank) + 1);
  const Tensor x = randn({64, 784}), y = randint(0, 10, {64});
  auto time_steps = [&](const std::function<void()>& step) {
    for (int i = 0; i < 10; ++i) step();
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
      g.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) step();
      t.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / steps);
    }
    return median(t);
  };
  // Plain DDP with an unsharded Adam.
  auto m1 = mlp();
  dist::DistributedDataParallel ddp(m1, {.group = &g});
  Adam adam(ddp.parameters(), {.lr = 1e-3});
  const double ddp_ms = 1e3 * time_steps([&] {
                          adam.zero_grad();
                          cross_entropy(ddp(Variable(x)), y).backward();
                          adam.step();
                        });
  // ZeRO-1: the same model, the optimizer does the communication.
  auto m2 = mlp();
  dist::ZeroOptions zo;
  zo.adam = {.lr = 1e-3};
  zo.group = &g;
  dist::ZeroRedundancyOptimizer zero(m2->parameters(), dist::ZeroOptimizer::Adam, zo);
  const double zero_ms = 1e3 * time_steps([&] {
                           zero.zero_grad();
                           cross_entropy((*m2)(Variable(x)), y).backward();
                           zero.step();
                         });
  if (rank == 0) {
    std::printf(
        "{\"bench\": \"zero_step\", \"world\": %d, \"ddp_adam_state_bytes_per_rank\": %zu, "
        "\"zero_adam_state_bytes_per_rank\": %zu, \"ddp_step_ms\": %.4f, \"zero_step_ms\": %.4f}\n",
        world, state_bytes(adam), zero.state_bytes(), ddp_ms, zero_ms);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int world = 2, steps = 50, rounds = 5;
  engine::Flags flags("zero_step", "Times a DDP step and a ZeRO step side by side, one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--steps", &steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.parse_or_exit(argc, argv);
  return fork_ranks(world, [&](int r, int port) { run_rank(r, world, port, steps, rounds); });
}
