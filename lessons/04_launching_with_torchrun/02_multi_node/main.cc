// Lesson 4, step 2: several machines. Each machine (node) runs one launcher with the same
// --nnodes, --master_addr, --master_port and --job_token, and its own --node_rank. Global
// ranks follow: node k's local rank j is rank k * nproc_per_node + j. two_nodes.sh makes
// the two nodes emulated machines when it can (tools/nodes.sh: each its own network
// address, hostname and /dev/shm), else two launchers on this machine. With --rounds, it
// goes on all-reducing, so that part 2 can cut the network between the machines.
//
//   bazel run //lessons/04_launching_with_torchrun:02_multi_node
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "tools/flags/flags.h"

using namespace engine;

namespace {

// This rank's node: the launcher's GROUP_RANK (torchrun's name for it), or, started some
// other way (srun, mpirun, by hand), what the ranks' layout implies: rank / ranks per node.
int node_rank(int rank) {
  const char* group_rank = std::getenv("GROUP_RANK");  // checked by init_process_group
  return group_rank ? std::atoi(group_rank) : rank / dist::get_local_world_size();
}

// Rounds 2, 3, ...: an all-reduce every pause_ms; each node's first rank says how long
// each one took (a round the network held up takes longer).
void more_rounds(int rounds, int pause_ms) {
  const int rank = dist::get_rank();
  for (int round = 2; round <= rounds; ++round) {
    std::this_thread::sleep_for(std::chrono::milliseconds(pause_ms));
    Tensor t = from_vector(std::vector<float>{float(rank)});
    const auto start = std::chrono::steady_clock::now();
    dist::all_reduce(t);
    const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if (dist::get_local_rank() == 0)
      std::printf("round %d: all_reduce of ranks = %.0f in %.2f s\n", round, t.item(), seconds);
    std::fflush(stdout);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  int rounds = 1, pause_ms = 300;
  Flags flags("02_multi_node", "One all-reduce across the machines, and more with --rounds.");
  flags.add("--rounds", &rounds, 1, 1000, "all-reduces to run");
  flags.add("--pause-ms", &pause_ms, 0, 60000, "milliseconds between them");
  flags.parse_or_exit(argc, argv);
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  Tensor t = from_vector(std::vector<float>{float(rank)});
  dist::all_reduce(t);  // 0 + 1 + ... + (world - 1), across both nodes
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  const std::string algorithm = dist::default_group().all_reduce_algorithm();
  const int node = node_rank(rank);
  std::printf("node %d, local rank %d -> global rank %d of %d; all_reduce of ranks = %.0f\n", node,
              dist::get_local_rank(), rank, world, t.item());
  const std::string address = dist::default_group().address();  // "" for a job of one rank: no one to listen for
  std::printf("rank %d runs on host %s, %s; all_reduce ran the %s algorithm\n", rank, host,
              address.empty() ? "alone, listening nowhere" : ("listening at " + address).c_str(), algorithm.c_str());
  lessons::report("global_rank", rank);
  lessons::report("node", node);
  lessons::report("local_rank", dist::get_local_rank());
  lessons::report("sum", t.item());
  lessons::report("host", host);
  lessons::report("algorithm", algorithm);
  std::fflush(stdout);
  more_rounds(rounds, pause_ms);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_multi_node: %s\n", e.what());
  return 1;
}
