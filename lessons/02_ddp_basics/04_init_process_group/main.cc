// Lesson 2, step 4: init the process group. Before any communication every process calls
// init_process_group: it reads where it sits in the job from the environment the launcher
// set, meets the others at MASTER_ADDR:MASTER_PORT, and connects to them. Then the first
// collective can run.
//
//   bazel run //lessons/02_ddp_basics:04_init_process_group
#include <cstdio>
#include <cstdlib>

#include "dist/dist.h"

using namespace engine;

static const char* env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "(unset)";
}

int main() try {
  std::printf("before init: RANK=%s WORLD_SIZE=%s MASTER_ADDR=%s MASTER_PORT=%s\n", env("RANK"), env("WORLD_SIZE"),
              env("MASTER_ADDR"), env("MASTER_PORT"));
  std::fflush(stdout);
  dist::init_process_group("gloo");  // dist.init_process_group(backend="gloo"); "nccl" on GPUs
  const int rank = dist::get_rank(), world = dist::get_world_size();

  // The first collective: every rank contributes rank + 1; all get 1 + 2 + ... + world.
  Tensor t = from_vector(std::vector<float>{float(rank + 1)});
  dist::all_reduce(t);
  std::printf("backend %s; all_reduce of rank + 1 over %d ranks = %.0f (expected %d)\n", dist::get_backend().c_str(),
              world, t.item(), world * (world + 1) / 2);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "04_init_process_group: %s\n", e.what());
  return 1;
}
