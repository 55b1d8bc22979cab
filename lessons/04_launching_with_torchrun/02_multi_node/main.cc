// Lesson 4, step 2: several machines. Each machine (node) runs one launcher with the same
// --nnodes, --master_addr, --master_port and --job_token, and its own --node_rank. Global
// ranks follow: node k's local rank j is rank k * nproc_per_node + j. two_nodes.sh makes
// the two nodes emulated machines when it can (tools/nodes.sh: each its own network
// address, hostname and /dev/shm), else two launchers on this machine.
//
//   bazel run //lessons/04_launching_with_torchrun:02_multi_node
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "dist/dist.h"
#include "lessons/common/lesson.h"

using namespace engine;

namespace {

// This rank's node: the launcher's GROUP_RANK (torchrun's name for it), or, started some
// other way (srun, mpirun, by hand), what the ranks' layout implies: rank / ranks per node.
int node_rank(int rank) {
  const char* group_rank = std::getenv("GROUP_RANK");  // checked by init_process_group
  return group_rank ? std::atoi(group_rank) : rank / dist::get_local_world_size();
}

}  // namespace

int main() try {
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
  std::printf("rank %d runs on host %s, listening at %s; all_reduce ran the %s algorithm\n", rank, host,
              dist::default_group().address().c_str(), algorithm.c_str());
  lessons::report("global_rank", rank);
  lessons::report("node", node);
  lessons::report("local_rank", dist::get_local_rank());
  lessons::report("sum", t.item());
  lessons::report("host", host);
  lessons::report("algorithm", algorithm);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_multi_node: %s\n", e.what());
  return 1;
}
