// The program the multi-node test runs on every rank of every emulated machine: it says
// where it runs and which all-reduce ran, checks every collective against its closed
// form, and trains a small model with DDP against one process on the global batch.
// Exit 1 names the first thing that was wrong.
//
//   launch --nnodes=2 --node_rank=K --nproc_per_node=2 ... multinode_probe [--die-rank R]
//          [--stall-rank R [--stall-elements N]] [--init-method file:///shared/path] [--leave-rank R]
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/tcp_group.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

namespace {

#define PROBE_CHECK(cond, ...)                                           \
  do {                                                                   \
    if (!(cond)) {                                                       \
      std::fprintf(stderr, "multinode_probe: " __VA_ARGS__);             \
      std::fprintf(stderr, " (rank %d, %s)\n", dist::get_rank(), #cond); \
      std::exit(1);                                                      \
    }                                                                    \
  } while (0)

// x[i] = (r + 1) * (i % 7 + 1): small integers, so float sums are exact.
Tensor input(int rank, int64_t n) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float((rank + 1) * (i % 7 + 1));
  return from_vector(v, {n});
}

void check_collectives(int rank, int world) {
  const int64_t n = (1 << 16) + 3;
  Tensor t = input(rank, n);
  dist::all_reduce(t);
  const std::vector<float> v = t.to_vector<float>();
  for (int64_t i = 0; i < n; ++i)
    PROBE_CHECK(v[size_t(i)] == float((i % 7 + 1) * world * (world + 1) / 2), "all_reduce sum, element %lld",
                (long long)i);
  Tensor m = input(rank, 100);
  dist::all_reduce(m, dist::ReduceOp::Max);
  PROBE_CHECK(m.to_vector<float>()[3] == float(4 * world), "all_reduce max");
  Tensor b = full({10}, double(rank));
  dist::broadcast(b, world - 1);
  PROBE_CHECK(b.to_vector<float>() == std::vector<float>(10, float(world - 1)), "broadcast from the last rank");
  std::vector<Tensor> all;
  dist::all_gather(all, full({4}, double(rank * 10)));
  for (int r = 0; r < world; ++r)
    PROBE_CHECK(all[size_t(r)].to_vector<float>() == std::vector<float>(4, float(r * 10)), "all_gather block %d", r);
  Tensor out = empty({5});
  dist::reduce_scatter(out, full({5 * world}, double(rank + 1)));
  PROBE_CHECK(out.to_vector<float>() == std::vector<float>(5, float(world * (world + 1) / 2)), "reduce_scatter");
  dist::barrier();
}

// DDP on this rank's rows of a global batch vs one process on all of it: the same weights.
double ddp_vs_one_process(int rank, int world) {
  auto make = [] {
    Generator g(7);
    return std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<Linear>(32, 64, true, &g),
                                                               std::make_shared<ReLU>(),
                                                               std::make_shared<Linear>(64, 10, true, &g)});
  };
  auto replica = make(), alone = make();
  dist::DistributedDataParallel ddp(replica);
  SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
  SGD opt_alone(alone->parameters(), {.lr = 0.1, .momentum = 0.9});
  const int64_t rows = 16;
  for (int step = 0; step < 5; ++step) {
    Generator g(100 + uint64_t(step));
    const Tensor x = randn({rows * world, 32}, &g);
    const Tensor y = randint(0, 10, {rows * world}, &g);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x.narrow(0, rank * rows, rows))), y.narrow(0, rank * rows, rows)).backward();
    opt.step();
    opt_alone.zero_grad();
    cross_entropy((*alone)(Variable(x)), y).backward();
    opt_alone.step();
  }
  double worst = 0, scale = 0;
  const auto a = replica->parameters(), b = alone->parameters();
  for (size_t i = 0; i < a.size(); ++i) {
    worst = std::max(worst, max(abs(a[i].data() - b[i].data())).item());
    scale = std::max(scale, max(abs(b[i].data())).item());
  }
  return worst / scale;
}

}  // namespace

int main(int argc, char** argv) try {
  int die_rank = -1;
  Flags flags("multinode_probe", "Checks collectives and DDP across (emulated) machines.");
  int stall_rank = -1, stall_elements = 1;
  flags.add("--die-rank", &die_rank, -1, 1 << 20, "this rank kills itself after the first checks");
  flags.add("--stall-rank", &stall_rank, -1, 1 << 20,
            "after the first checks, this rank sleeps 2 minutes while the others wait in an all_reduce");
  flags.add("--stall-elements", &stall_elements, 1, 1 << 26,
            "float32 elements in that all_reduce (past the socket buffers, 16 MiB each way, the stalled "
            "rank's receive window closes)");
  dist::InitOptions init;
  flags.add("--init-method", &init.init_method, "init_process_group's init_method (env://, tcp://, file://)");
  int leave_rank = -1;
  flags.add("--leave-rank", &leave_rank, -1, 1 << 20, "this rank (its RANK) exits 0 before init_process_group");
  flags.parse_or_exit(argc, argv);
  if (const char* r = std::getenv("RANK"); r && leave_rank >= 0 && std::to_string(leave_rank) == r)
    return std::printf("rank %d: leaving before init_process_group\n", leave_rank), 0;
  dist::init_process_group("gloo", init);
  const int rank = dist::get_rank(), world = dist::get_world_size();
  auto& g = dynamic_cast<dist::ProcessGroupTCP&>(dist::default_group());
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::string local;
  for (int r : g.local_ranks()) local += (local.empty() ? "" : ",") + std::to_string(r);
  std::printf("rank %d on %s at %s: all_reduce runs %s over %d machines; ranks here: %s\n", rank, host,
              g.address().c_str(), g.all_reduce_algorithm().c_str(), g.machine_count(), local.c_str());
  std::fflush(stdout);
  check_collectives(rank, world);
  std::printf("rank %d: every collective equals its closed form\n", rank);
  std::fflush(stdout);
  if (rank == die_rank) {
    std::printf("rank %d: killing myself now\n", rank);
    std::fflush(stdout);
    kill(getpid(), SIGKILL);
  }
  if (stall_rank >= 0) {  // the others' part of the all_reduce is sent (as much as fits), and acknowledged
    if (rank == stall_rank) {
      std::printf("rank %d: stalling\n", rank);
      std::fflush(stdout);
      sleep(120);
    }
    Tensor t = ones({stall_elements});
    dist::all_reduce(t);
  }
  const double rel = ddp_vs_one_process(rank, world);
  std::printf("rank %d: DDP vs one process on the global batch: max |difference| / max |weight| = %.2e\n", rank, rel);
  PROBE_CHECK(rel < 1e-5, "DDP differs from one process by %.2e", rel);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "multinode_probe: %s\n", e.what());
  return 1;
}
