// gather, scatter, reduce and all_to_all of float32 over our CPU backend, timed like
// bench/torch_collectives.py times gloo's: rank 0 prints one JSON line per collective and
// size (the median over rounds of the mean over iterations). bench/collectives.py runs both
// in alternating rounds and tabulates the ratios.
//
//   bazel run //bench:collectives_bench -- --world 4
#include <chrono>
#include <cstdio>
#include <string>
#include <vector>

#include "bench/fork_ranks.h"
#include "bench/median.h"
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
}

void time_all(ProcessGroupTCP& g, const std::vector<int64_t>& sizes, int rounds) {
  for (const std::string name : {"gather", "scatter", "reduce", "all_to_all"})
    for (int64_t nbytes : sizes) {
      const int64_t n = std::max<int64_t>(g.size(), nbytes / 4 / g.size() * g.size());
      Tensor t = full({n}, double(g.rank() + 1)), out = empty({n});
      std::vector<Tensor> many;
      if (name == "scatter" && g.rank() == 0)
        for (int r = 0; r < g.size(); ++r) many.push_back(full({n}, double(r)));
      for (int i = 0; i < 3; ++i) call(g, name, t, many, out);
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
            "\"time_us\": %.2f}\n",
            name.c_str(), g.size(), (long long)(n * 4), median(times) * 1e6);
        std::fflush(stdout);
      }
    }
}

}  // namespace

int main(int argc, char** argv) try {
  int world = 2, rounds = 5;
  std::vector<int64_t> sizes = {65536, 1 << 20, 1 << 24};
  Flags flags("collectives_bench", "Times gather, scatter, reduce and all_to_all, one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.parse_or_exit(argc, argv);
  return fork_ranks(world, [&](int rank, int port) {
    StoreOptions so;
    so.timeout = std::chrono::seconds(60);
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
    TCPGroupOptions go;
    go.timeout = std::chrono::seconds(60);
    ProcessGroupTCP g(store, rank, world, go);
    time_all(g, sizes, rounds);
  });
} catch (const std::exception& e) {
  std::fprintf(stderr, "collectives_bench: %s\n", e.what());
  return 1;
}
