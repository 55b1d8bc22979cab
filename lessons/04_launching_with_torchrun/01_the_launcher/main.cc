// Lesson 4, step 1: the launcher. `launch --nproc_per_node=N program` (torchrun's flags)
// starts N copies of the program and tells each where it sits through environment
// variables; init_process_group reads them. It also labels every line a rank prints.
//
//   bazel run //lessons/04_launching_with_torchrun:01_the_launcher
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dist/dist.h"

using namespace engine;

int main() try {
  std::string line;
  for (const char* name : {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR",
                           "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT"}) {
    const char* v = std::getenv(name);
    line += std::string(" ") + name + "=" + (v ? v : "(unset)");
  }
  const char* token = std::getenv("ENGINE_JOB_TOKEN");
  std::printf("my environment:%s ENGINE_JOB_TOKEN=<%zu characters>\n", line.c_str(), token ? std::strlen(token) : 0);
  std::fflush(stdout);
  dist::init_process_group("gloo");  // reads them
  std::printf("init_process_group read: rank %d of %d, local rank %d of %d (from %s variables)\n", dist::get_rank(),
              dist::get_world_size(), dist::get_local_rank(), dist::get_local_world_size(),
              dist::read_launch_env().source.c_str());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_the_launcher: %s\n", e.what());
  return 1;
}
