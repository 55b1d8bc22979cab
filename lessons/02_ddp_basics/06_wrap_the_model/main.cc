// Lesson 2, step 6: wrap the model. Wrapping is one line, and it does a first thing at
// once: rank 0's parameters are broadcast to every rank, so all replicas start equal even
// if each process initialised its model differently.
//
//   bazel run //lessons/02_ddp_basics:06_wrap_the_model
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/common/lesson.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  // A different seed on every rank: the models start different, on purpose.
  auto model = lessons::toy_mlp(/*seed=*/100 + uint64_t(rank));
  std::printf("rank %d before wrapping: parameters %s\n", rank, lessons::fingerprint(*model).c_str());
  lessons::report("before_wrapping", lessons::fingerprint(*model));
  std::fflush(stdout);
  dist::barrier();

  dist::DistributedDataParallel ddp(model);  // model = DDP(model, device_ids=[local_rank])
  std::printf("rank %d after wrapping:  parameters %s\n", rank, lessons::fingerprint(ddp.module()).c_str());
  lessons::report("after_wrapping", lessons::fingerprint(ddp.module()));
  std::printf("rank %d: ddp.module() is the model it wraps: %s\n", rank, &ddp.module() == model.get() ? "yes" : "no");
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "06_wrap_the_model: %s\n", e.what());
  return 1;
}
