// gather, scatter, reduce and all_to_all of float32 over our CPU backend, timed like
// bench/torch_collectives.py times gloo's: rank 0 prints one JSON line per collective and
// size (the median over rounds of the mean over iterations). bench/collectives.py runs both
// in alternating rounds and tabulates the ratios. --ops chooses others too (broadcast,
// all_gather, reduce_scatter: bench/hierarchical_nodes.py times them across machines).
//
//   bazel run //bench:collectives_bench -- --world 4
//   launch --nnodes=2 ... collectives_bench --launched --ops all_gather,broadcast
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/fork_ranks.h"
#include "bench/median.h"
#include "dist/dist.h"
#include "dist/tcp_group.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::dist;
using Seconds = std::chrono::duration<double>;

namespace {

// One call of `name` on n floats per rank (the collective's "size": what each rank holds).
void call(ProcessGroupTCP& g, const std::string& name, Tensor& t, std::vector<Tensor>& many, Tensor& out) {
  if (name == "gather") g.gather(&many, t, 0).wait();
  if (name == "scatter") g.scatter(out, many, 0).wait();
  if (name == "reduce") g.reduce(t, 0).wait();
  if (name == "all_to_all") g.all_to_all(out, t).wait();
  if (name == "broadcast") g.broadcast(t, 0).wait();
  if (name == "all_gather") g.all_gather_into_tensor(many[0], t).wait();
  if (name == "reduce_scatter") g.reduce_scatter(out, many[0]).wait();
}

// Sizes are what each rank holds: all_gather's input and reduce_scatter's output (the
// other side is world times larger).
void time_all(ProcessGroupTCP& g, const std::vector<std::string>& ops, const std::vector<int64_t>& sizes, int rounds) {
  for (const std::string& name : ops)
    for (int64_t nbytes : sizes) {
      const int64_t n = std::max<int64_t>(g.size(), nbytes / 4 / g.size() * g.size());
      Tensor t = full({n}, double(g.rank() + 1)), out = empty({n});
      std::vector<Tensor> many;
      if (name == "scatter" && g.rank() == 0)
        for (int r = 0; r < g.size(); ++r) many.push_back(full({n}, double(r)));
      if (name == "all_gather" || name == "reduce_scatter") many.push_back(full({n * g.size()}, 1.0));
      for (int i = 0; i < 3; ++i) call(g, name, t, many, out);
      const uint64_t before = g.bytes_sent();  // rank 0's bytes for one call
      call(g, name, t, many, out);
      const uint64_t sent = g.bytes_sent() - before;
      const int iters = int(std::max<int64_t>(3, std::min<int64_t>(100, int64_t(1e8) / (n * 4))));
      std::vector<double> times;
      for (int r = 0; r < rounds; ++r) {
        g.barrier().wait();
        const auto t0 = std::chrono::steady_clock::now();
        for (int i = 0; i < iters; ++i) call(g, name, t, many, out);
        g.barrier().wait();  // rooted calls return on a sender before the root is done
        times.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / iters);
      }
      if (g.rank() == 0) {
        std::printf(
            "{\"impl\": \"engine-cpu\", \"collective\": \"%s\", \"world\": %d, \"bytes\": %lld, "
            "\"time_us\": %.2f, \"algorithm\": \"%s\", \"bytes_sent\": %llu}\n",
            name.c_str(), g.size(), (long long)(n * 4), median(times) * 1e6, g.all_reduce_algorithm().c_str(),
            (unsigned long long)sent);
        std::fflush(stdout);
      }
    }
}

}  // namespace

int main(int argc, char** argv) try {
  int world = 2, rounds = 5;
  bool launched = false;
  std::vector<int64_t> sizes = {65536, 1 << 20, 1 << 24};
  std::string ops_list = "gather,scatter,reduce,all_to_all";
  Flags flags("collectives_bench",
              "Times collectives (gather, scatter, reduce, all_to_all, ...), one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.add_list("--sizes", &sizes, 4, int64_t(1) << 32, "bytes each rank holds");
  flags.add("--ops", &ops_list,
            "comma-separated: gather scatter reduce all_to_all broadcast all_gather reduce_scatter");
  flags.add("--launched", &launched, "be one rank of a job the launcher started (RANK, WORLD_SIZE, ...)");
  flags.parse_or_exit(argc, argv);
  std::vector<std::string> ops;
  for (size_t at = 0; at <= ops_list.size();) {
    const size_t comma = std::min(ops_list.find(',', at), ops_list.size());
    ops.push_back(ops_list.substr(at, comma - at));
    at = comma + 1;
  }
  for (const std::string& op : ops)
    if (op != "gather" && op != "scatter" && op != "reduce" && op != "all_to_all" && op != "broadcast" &&
        op != "all_gather" && op != "reduce_scatter") {
      std::fprintf(stderr, "collectives_bench: --ops: unknown collective '%s'\n", op.c_str());
      return 2;
    }
  if (launched) {
    dist::init_process_group("gloo");
    time_all(dynamic_cast<ProcessGroupTCP&>(dist::default_group()), ops, sizes, rounds);
    dist::destroy_process_group();
    return 0;
  }
  return fork_ranks(world, [&](int rank, int port) {
    StoreOptions so;
    so.timeout = std::chrono::seconds(60);
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
    TCPGroupOptions go;
    go.timeout = std::chrono::seconds(60);
    ProcessGroupTCP g(store, rank, world, go);
    time_all(g, ops, sizes, rounds);
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "collectives_bench: %s\n", e.what());
  return 1;
}
