// One DDP training step of the MLP 784-256-256-10 (SGD momentum 0.9, cross-entropy, random
// data, one thread per rank), as ../shared/reference/torch_ddp_step.py measures PyTorch's.
// Also times the same step under no_sync() (no communication): the difference is the
// communication that backward could not hide ("exposed"), also given against the slowest
// rank's no-sync step, with the spread of the ranks' no-sync steps. --hook runs the step
// with a communication hook (bf16/fp16 compression, PowerSGD); the bytes this rank sent per
// step and the buckets' sizes are printed, so a cost model can predict the step
// (bench/ddp_nodes.py does, across emulated machines).
//
//   bazel run //bench:ddp_step -- --world 2 --batch 64 [--hook bf16]
//   launch --nnodes=2 ... ddp_step --launched     # one rank per launched process
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string>
#include <vector>

#include "bench/fork_ranks.h"
#include "bench/median.h"
#include "dist/comm_hooks.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/powersgd.h"
#include "dist/tcp_group.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;
using Seconds = std::chrono::duration<double>;

namespace {

struct Options {
  int64_t batch = 64;
  int steps = 100, rounds = 5;
  double first_bucket_mb = 0;
  bool view = false;
  std::string hook = "none";
};

// Registers the hook named by --hook; PowerSGD (rank 4, compressing from the first step)
// keeps its state in `powersgd`, which must outlive the DDP.
void register_hook(dist::DistributedDataParallel& ddp, const std::string& hook, dist::PowerSGDState& powersgd) {
  if (hook == "allreduce") ddp.register_comm_hook(dist::hooks::allreduce_hook);
  if (hook == "bf16") ddp.register_comm_hook(dist::hooks::bf16_compress_hook);
  if (hook == "fp16") ddp.register_comm_hook(dist::hooks::fp16_compress_hook);
  if (hook == "powersgd") {
    powersgd.matrix_approximation_rank = 4;
    powersgd.start_powerSGD_iter = 1;
    ddp.register_comm_hook([&powersgd](dist::GradBucket& b) { return dist::powerSGD_hook(powersgd, b); });
  }
}

// The buckets' sizes in bytes (float32 gradients), in the order they are reduced.
std::string bucket_bytes(const dist::DistributedDataParallel& ddp, const Module& model) {
  std::map<std::string, int64_t> numel;
  for (const auto& [name, p] : model.named_parameters()) numel[name] = p.data().numel();
  std::string out;
  for (const auto& names : ddp.bucket_names()) {
    int64_t n = 0;
    for (const auto& name : names) n += numel.at(name);
    out += (out.empty() ? "" : ", ") + std::to_string(n * 4);
  }
  return "[" + out + "]";
}

void run_rank(dist::ProcessGroupTCP& g, const Options& o) {
  const int rank = g.rank(), world = g.size();
  const int64_t batch = o.batch;
  manual_seed(0);
  auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 256),
      std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
  dist::DDPOptions opts;
  opts.group = &g;
  if (o.first_bucket_mb > 0) opts.first_bucket_mb = o.first_bucket_mb;
  opts.gradient_as_bucket_view = o.view;
  // The no_sync() rounds step each rank with its own gradient (a timing device, not
  // training), so the replicas part ways by design, and DDP's check, which compares them at
  // forwards 1, 2, 4, ..., would rightly stop the run at the first power of two in those
  // rounds. PyTorch's DDP, the peer, has no such check either.
  opts.check_replicas = false;
  dist::DistributedDataParallel ddp(model, opts);
  dist::PowerSGDState powersgd;
  register_hook(ddp, o.hook, powersgd);
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
    for (int r = 0; r < o.rounds; ++r) {
      g.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < o.steps; ++i) {
        if (sync) {
          step();
        } else {
          auto no_sync = ddp.no_sync();
          step();
        }
      }
      t.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / o.steps);
    }
    return median(t);
  };
  for (int i = 0; i < 20; ++i) step();
  const uint64_t sent0 = g.bytes_sent();
  step();
  const uint64_t sent_per_step = g.bytes_sent() - sent0;
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
        "\"gradient_as_bucket_view\": %s, \"hook\": \"%s\", \"algorithm\": \"%s\", "
        "\"bytes_sent_per_step\": %llu, \"bucket_bytes\": %s}\n",
        world, (long long)batch, with_sync * 1e3, double(batch * world) / with_sync, without * 1e3,
        (with_sync - without) * 1e3, (with_sync - slowest.item()) * 1e3, (slowest.item() - fastest.item()) * 1e3,
        g.uses_shared_memory() ? "true" : "false", o.view ? "true" : "false", o.hook.c_str(),
        g.all_reduce_algorithm().c_str(), (unsigned long long)sent_per_step, bucket_bytes(ddp, *model).c_str());
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  int world = 2;
  bool launched = false;
  Options o;
  engine::Flags flags("ddp_step", "Times the MLP's DDP training step, one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--batch", &o.batch, 1, 1 << 16, "images per step and rank");
  flags.add("--steps", &o.steps, 1, 1 << 20, "steps per round");
  flags.add("--rounds", &o.rounds, 1, 1000, "rounds (the median is reported)");
  flags.add("--first-bucket-mb", &o.first_bucket_mb, 0, 1024, "first bucket's cap (0: DDP's default)");
  flags.add("--gradient-as-bucket-view", &o.view, ".grad becomes a view into its bucket");
  flags.add("--hook", &o.hook, {"none", "allreduce", "bf16", "fp16", "powersgd"},
            "communication hook (powersgd: rank 4 from the first step)");
  flags.add("--launched", &launched, "be one rank of a job the launcher started (RANK, WORLD_SIZE, ...)");
  flags.parse_or_exit(argc, argv);
  if (launched) {
    dist::init_process_group("gloo");
    run_rank(dynamic_cast<dist::ProcessGroupTCP&>(dist::default_group()), o);
    dist::destroy_process_group();
    return 0;
  }
  return fork_ranks(world, [&](int rank, int port) {
    dist::StoreOptions so;
    so.timeout = std::chrono::seconds(60);
    auto store = std::make_shared<dist::TCPStore>("127.0.0.1", port, rank == 0, so);
    dist::TCPGroupOptions go;
    go.timeout = std::chrono::seconds(60);
    dist::ProcessGroupTCP g(store, rank, world, go);
    run_rank(g, o);
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "ddp_step: %s\n", e.what());
  return 1;
}
