// Lesson 2, step 3: rank and world size. Each process gets a rank (its id, 0 .. world-1)
// and they all share the world size; the local rank numbers the processes on one machine
// (it picks the GPU). Rank 0 is the one that logs and saves.
//
//   bazel run //lessons/02_ddp_basics:03_rank_and_world_size
#include <cstdio>

#include "dist/dist.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();         // rank = dist.get_rank()
  const int world = dist::get_world_size();  // world = dist.get_world_size()
  std::printf("rank %d of world size %d (local rank %d of %d on this machine)\n", rank, world, dist::get_local_rank(),
              dist::get_local_world_size());
  if (rank == 0) std::printf("I am rank 0: I do the logging and the saving\n");
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "03_rank_and_world_size: %s\n", e.what());
  return 1;
}
