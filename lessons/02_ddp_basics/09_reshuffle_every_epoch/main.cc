// Lesson 2, step 9: reshuffle every epoch. The sampler's shuffle is seeded with seed +
// epoch, the same on every rank (so the slices still fit together). Forget set_epoch and
// the epoch stays 0: every epoch repeats the same order (and rank 0's sampler says so).
//
//   bazel run //lessons/02_ddp_basics:09_reshuffle_every_epoch
#include <cstdio>

#include "dist/dist.h"
#include "dist/distributed_sampler.h"
#include "lessons/common/lesson.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  dist::DistributedSampler forgot(12), right(12);
  for (int epoch = 0; epoch < 3; ++epoch) {
    // Without set_epoch:
    const std::string without = lessons::join(forgot.indices());
    std::printf("rank %d epoch %d without set_epoch: %s\n", rank, epoch, without.c_str());
    lessons::report("epoch_" + std::to_string(epoch) + "_without_set_epoch", without);
    right.set_epoch(epoch);  // sampler.set_epoch(epoch) at the top of every epoch
    const std::string with = lessons::join(right.indices());
    std::printf("rank %d epoch %d with set_epoch:    %s\n", rank, epoch, with.c_str());
    lessons::report("epoch_" + std::to_string(epoch) + "_with_set_epoch", with);
    std::fflush(stdout);  // in order with the sampler's warning on stderr
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "09_reshuffle_every_epoch: %s\n", e.what());
  return 1;
}
