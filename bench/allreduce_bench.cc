// all_reduce (sum) of float32 over our CPU backend, measured like
// ../shared/reference/torch_allreduce.py measures gloo, plus the machine's single-stream
// TCP loopback bandwidth: the ceiling a TCP ring works under.
//
//   bazel run //bench:allreduce_bench -- --world 2
//   bazel run //bench:allreduce_bench -- --world 2 --in-place   # on shared buffers, as DDP
//   launch --nnodes=2 ... allreduce_bench --launched              # one rank per launched process
//                                                                 # (bench/allreduce_nodes.py)
//
// Prints one JSON line per size (from rank 0) and one for loopback. bench/allreduce.py
// runs this and the PyTorch script alternately and tabulates the ratios.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
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

// One TCP stream over loopback, 1 MiB sends, ~0.5 s: bytes per second.
double loopback_bandwidth() {
  Listener l = Listener::bind("127.0.0.1", 0);
  const size_t chunk = 1 << 20;
  const auto budget = std::chrono::milliseconds(500);
  size_t received = 0;
  double seconds = 0;
  std::thread reader([&] {
    Socket s = l.accept(deadline_in(std::chrono::seconds(5)));
    std::vector<char> buf(chunk);
    const auto t0 = std::chrono::steady_clock::now();
    try {
      while (true) {
        s.recv_all(buf.data(), chunk, deadline_in(std::chrono::seconds(5)), "writer");
        received += chunk;
      }
    } catch (const Error&) {}
    seconds = Seconds(std::chrono::steady_clock::now() - t0).count();
  });
  {
    Socket s = Socket::connect("127.0.0.1", l.port(), deadline_in(std::chrono::seconds(5)), "reader");
    std::vector<char> buf(chunk, 1);
    const auto t0 = std::chrono::steady_clock::now();
    while (std::chrono::steady_clock::now() - t0 < budget)
      s.send_all(buf.data(), chunk, deadline_in(std::chrono::seconds(5)), "reader");
  }
  reader.join();
  return double(received) / seconds;
}

void time_sizes(ProcessGroupTCP& g, const std::vector<int64_t>& sizes, int rounds, bool in_place) {
  const int rank = g.rank(), world = g.size();
  for (int64_t nbytes : sizes) {
    const int64_t n = std::max<int64_t>(1, nbytes / 4);
    // --in-place: the tensor lives in memory every rank maps, as DDP's buckets do (reduced
    // where it is, with no staging copies); otherwise it is ordinary process memory.
    Tensor t = in_place ? g.shared_buffer(n) : empty({n});
    t.fill_(double(rank + 1));
    for (int i = 0; i < 3; ++i) g.all_reduce(t).wait();
    const int iters = int(std::max<int64_t>(3, std::min<int64_t>(200, int64_t(2e8) / (n * 4))));
    std::vector<double> times;
    const uint64_t by_waiters = g.collectives_run_by_waiters();
    for (int r = 0; r < rounds; ++r) {
      g.barrier().wait();
      const auto t0 = std::chrono::steady_clock::now();
      for (int i = 0; i < iters; ++i) g.all_reduce(t).wait();
      times.push_back(Seconds(std::chrono::steady_clock::now() - t0).count() / iters);
    }
    const double dt = median(times);
    // Timed calls (and barriers) that ran on the waiting thread rather than the worker.
    const double waiter_share = double(g.collectives_run_by_waiters() - by_waiters) / double(rounds * (iters + 1));
    if (rank == 0) {
      const double algbw = double(n) * 4 / dt / 1e9;
      std::printf(
          "{\"impl\": \"engine-cpu\", \"path\": \"%s%s\", \"world\": %d, \"bytes\": %lld, \"time_us\": %.2f, "
          "\"algbw_GBps\": %.4f, \"busbw_GBps\": %.4f, \"run_by_waiter\": %.2f}\n",
          g.all_reduce_algorithm().c_str(),  // ring, shm or hierarchical
          in_place ? "-in-place" : "", world, (long long)(n * 4), dt * 1e6, algbw, algbw * 2 * (world - 1) / world,
          waiter_share);
      std::fflush(stdout);
    }
  }
}

void run_rank(int rank, int world, int port, const std::vector<int64_t>& sizes, int rounds, bool in_place) {
  StoreOptions so;
  so.timeout = std::chrono::seconds(60);
  auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
  TCPGroupOptions go;
  go.timeout = std::chrono::seconds(60);
  ProcessGroupTCP g(store, rank, world, go);
  time_sizes(g, sizes, rounds, in_place);
}

}  // namespace

int main(int argc, char** argv) try {
  int world = 2, rounds = 3;
  bool in_place = false;
  std::vector<int64_t> sizes = {4096, 262144, 1 << 20, 1 << 22, 1 << 24, 1 << 26};
  Flags flags("allreduce_bench", "Times all_reduce at several sizes, one process per rank.");
  flags.add("--world", &world, 1, 64, "ranks");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.add_list("--sizes", &sizes, 4, int64_t(1) << 32, "bytes per all-reduce");
  flags.add("--in-place", &in_place, "reduce in DDP's shared bucket (the in-place path)");
  bool launched = false;
  flags.add("--launched", &launched, "be one rank of a job the launcher started (RANK, WORLD_SIZE, ...)");
  flags.parse_or_exit(argc, argv);
  if (launched) {
    dist::init_process_group("gloo");
    time_sizes(dynamic_cast<ProcessGroupTCP&>(dist::default_group()), sizes, rounds, in_place);
    dist::destroy_process_group();
    return 0;
  }
  const double lo = loopback_bandwidth();
  std::printf("{\"impl\": \"loopback-1-stream\", \"GBps\": %.4f}\n", lo / 1e9);
  std::fflush(stdout);
  return fork_ranks(world, [&](int r, int port) { run_rank(r, world, port, sizes, rounds, in_place); });
} catch (const std::exception& e) {
  std::fprintf(stderr, "allreduce_bench: %s\n", e.what());
  return 1;
}
