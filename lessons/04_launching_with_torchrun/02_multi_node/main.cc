// Lesson 4, step 2: several machines. Each machine (node) runs one launcher with the same
// --nnodes, --master_addr, --master_port and --job_token, and its own --node_rank. Global
// ranks follow: node k's local rank j is rank k * nproc_per_node + j. Here two "nodes"
// are two launchers on this one machine.
//
//   bazel run //lessons/04_launching_with_torchrun:02_multi_node
#include <unistd.h>

#include <cstdio>

#include "dist/dist.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  Tensor t = from_vector(std::vector<float>{float(rank)});
  dist::all_reduce(t);  // 0 + 1 + ... + (world - 1), across both nodes
  std::printf("node %s, local rank %d -> global rank %d of %d; all_reduce of ranks = %.0f\n", std::getenv("GROUP_RANK"),
              dist::get_local_rank(), rank, world, t.item());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_multi_node: %s\n", e.what());
  return 1;
}
