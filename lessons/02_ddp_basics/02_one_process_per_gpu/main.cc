// Lesson 2, step 2: one process per device. The launcher starts one separate process per
// device (here 2, as `torchrun --nproc_per_node=2` would): separate address spaces,
// separate interpreters in PyTorch's case (no GIL to share), each driving its own device.
//
//   bazel run //lessons/02_ddp_basics:02_one_process_per_gpu
#include <unistd.h>

#include <cstdio>
#include <set>

#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "tensor/cuda/runtime.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const std::string device =
      cuda::device_count() > 0 ? "cuda:" + std::to_string(dist::get_local_rank()) : std::string("cpu");
  std::printf("rank %d is process %d, parent %d, driving %s\n", rank, int(getpid()), int(getppid()), device.c_str());
  lessons::report("pid", double(getpid()));
  lessons::report("parent", double(getppid()));
  std::fflush(stdout);

  // Every rank's process id, gathered on every rank.
  std::vector<Tensor> pids;
  dist::all_gather(pids, from_vector(std::vector<int64_t>{int64_t(getpid())}));
  if (rank == 0) {
    std::set<int64_t> distinct;
    for (auto& p : pids) distinct.insert(int64_t(p.item()));
    std::printf("%d ranks ran in %zu distinct processes\n", world, distinct.size());
    lessons::report("distinct_processes", double(distinct.size()));
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_one_process_per_gpu: %s\n", e.what());
  return 1;
}
