// Lesson 2, step 1: meet DDP. Two processes, one copy of the model each, each its own
// half of every batch; DistributedDataParallel averages the gradients during backward, so
// both copies take the same step as one process training on the whole batch would.
//
//   bazel run //lessons/02_ddp_basics:01_meet_ddp
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const int64_t batch = 32 * world, rows = 32;

  auto model = lessons::toy_mlp(/*seed=*/0);
  dist::DistributedDataParallel ddp(model);  // the one line
  SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});

  // For comparison, rank 0 also trains one copy alone on the whole batch.
  auto alone = lessons::toy_mlp(0);
  SGD opt_alone(alone->parameters(), {.lr = 0.05, .momentum = 0.9});

  for (int step = 0; step < 30; ++step) {
    Tensor x, y;
    lessons::toy_batch(step, batch, /*seed=*/0, &x, &y);
    opt.zero_grad();
    Variable loss = cross_entropy(ddp(Variable(x.narrow(0, rank * rows, rows))), y.narrow(0, rank * rows, rows));
    loss.backward();  // gradients are averaged over the ranks here
    opt.step();
    if (rank == 0) {
      opt_alone.zero_grad();
      cross_entropy((*alone)(Variable(x)), y).backward();
      opt_alone.step();
      if (step % 10 == 0) std::printf("step %2d  loss on my half %.4f\n", step, loss.item());
    }
  }
  std::printf("rank %d parameters %s\n", rank, lessons::fingerprint(ddp.module()).c_str());
  lessons::report("fingerprint", lessons::fingerprint(ddp.module()));
  if (rank == 0) {
    const double rel = lessons::relative_difference(*model, *alone);
    std::printf("DDP on %d x %lld rows vs one process on %lld rows: max |difference| / max |weight| = %.2e\n", world,
                (long long)rows, (long long)batch, rel);
    lessons::report("relative_difference", rel);
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_meet_ddp: %s\n", e.what());
  return 1;
}
