// One DDP training step of the MLP 784-256-256-10 (SGD momentum 0.9, cross-entropy, random
// data, one thread per rank), as ../shared/reference/torch_ddp_step.py measures PyTorch's.
// Also times the same step under no_sync() (no communication): the difference is the
// communication that backward could not hide ("exposed"), also given against the slowest
// rank's no-sync step, with the spread of the ranks' no-sync steps.
//
//   bazel run //bench:ddp_step -- --world 2 --batch 64
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
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;
using Seconds = std::chrono::duration<double>;

namespace {

void run_rank(int rank, int world, int port, int64_t batch, int steps, int rounds, double first_bucket_mb, bool view) {
  dist::StoreOptions so;
  so.timeout = std::chrono::seconds(60);
  auto store = std::make_shared<dist::TCPStore>("127.0.0.1", port, rank == 0, so);
  dist::TCPGroupOptions go;
  go.timeout = std::chrono::seconds(60);
  dist::ProcessGroupTCP g(store, rank, world, go);
  manual_seed(0);
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
      std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
  dist::DDPOptions opts;
  opts.group = &g;
  if (first_bucket_mb > 0) opts.first_bucket_mb = first_bucket_mb;
  opts.gradient_as_bucket_view = view;
  dist::DistributedDataParallel ddp(model, opts);
  SGD opt(ddp.parameters(), {.lr = 0.01, .momentum = 0.9});
  manual_seed(uint64_t(rank) + 1);
  const Tensor x = randn({batch, 784}), y = randint(0, 10, {batch});
  auto step = [&] {
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  };
  auto timed = [&](bool sync) {
    std::vector<double> t;
    for (int r = 0; r < rounds; ++r) {
      g.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < steps; ++i) {
        if (sync) {
          step();
        } else {
          auto no_sync = ddp.no_sync();
          step();
        }
      }
      t.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / steps);
    }
    return median(t);
  };
  for (int i = 0; i < 20; ++i) step();
  const double with_sync = timed(true), without = timed(false);
  // Synced ranks all go at the slowest one's pace: its no-sync step is the fairer baseline,
  // and the spread between ranks' no-sync steps is time a synced step waits on top.
  Tensor slowest = full({1}, without), fastest = full({1}, without);
  g.all_reduce(slowest, dist::ReduceOp::Max).wait();
  g.all_reduce(fastest, dist::ReduceOp::Min).wait();
  if (rank == 0) {
    std::printf(
        "{\"impl\": \"engine-ddp\", \"world\": %d, \"batch_per_rank\": %lld, \"step_ms\": %.4f, "
        "\"global_samples_per_s\": %.1f, \"nosync_step_ms\": %.4f, \"exposed_comm_ms\": %.4f, "
        "\"exposed_vs_slowest_rank_ms\": %.4f, \"nosync_rank_spread_ms\": %.4f, \"shm\": %s, "
        "\"gradient_as_bucket_view\": %s}\n",
        world, (long long)batch, with_sync * 1e3, double(batch * world) / with_sync, without * 1e3,
        (with_sync - without) * 1e3, (with_sync - slowest.item()) * 1e3, (slowest.item() - fastest.item()) * 1e3,
        g.uses_shared_memory() ? "true" : "false", view ? "true" : "false");
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) {
  int world = 2, steps = 100, rounds = 5;
  int64_t batch = 64;
  double first_bucket_mb = 0;
  bool view = false;
  engine::Flags flags("ddp_step", "Times the MLP's DDP training step, one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--batch", &batch, 1, 1 << 16, "images per step and rank");
  flags.add("--steps", &steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.add("--first-bucket-mb", &first_bucket_mb, 0, 1024, "first bucket's cap (0: DDP's default)");
  flags.add("--gradient-as-bucket-view", &view, ".grad becomes a view into its bucket");
  flags.parse_or_exit(argc, argv);
  return fork_ranks(world,
                    [&](int r, int port) { run_rank(r, world, port, batch, steps, rounds, first_bucket_mb, view); });
}
