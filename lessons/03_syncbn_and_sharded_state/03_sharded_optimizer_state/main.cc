// Lesson 3, step 3: sharded optimizer state (ZeRO stage 1). Adam keeps two numbers per
// parameter (the running mean and variance of the gradient): twice the model's size, and
// under DDP every rank holds all of it. ZeroRedundancyOptimizer gives rank r only shard r:
// the gradients are reduce-scattered (rank r receives the average of its shard only), each
// rank updates its shard with Adam, and the updated shards are all-gathered back into
// every rank's parameters. Same training, 1/N of the state per rank.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:03_sharded_optimizer_state
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "lessons/common/lesson.h"
#include "nn/adam.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();

  // The reference: DDP and an ordinary Adam, which holds the whole state on every rank.
  auto ref = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(ref);
  Adam adam(ddp.parameters(), {.lr = 1e-3});
  // ZeRO: a plain model; the optimizer does the communication.
  auto model = lessons::toy_mlp(0);
  dist::ZeroOptions zo;
  zo.adam = {.lr = 1e-3};
  dist::ZeroRedundancyOptimizer zero(model->parameters(), dist::ZeroOptimizer::Adam, zo);

  for (int step = 0; step < 10; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * world + rank, 32, 0, &x, &y);  // this rank's batch
    adam.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    adam.step();
    zero.zero_grad();
    cross_entropy((*model)(Variable(x)), y).backward();
    zero.step();
  }
  size_t full = 0;
  for (auto& [key, t] : adam.state_dict())
    if (key.rfind("state.", 0) == 0) full += t.nbytes();
  std::printf("rank %d: Adam state %zu bytes unsharded, %zu bytes in my ZeRO shard (%.3f of it)\n", rank, full,
              zero.state_bytes(), double(zero.state_bytes()) / double(full));
  lessons::report("full_state_bytes", double(full));
  lessons::report("shard_state_bytes", double(zero.state_bytes()));
  const double d = lessons::max_difference(*model, *ref);
  std::printf("rank %d: after 10 steps max |ZeRO parameters - DDP+Adam parameters| = %.2e\n", rank, d);
  std::printf("rank %d: ZeRO parameters %s\n", rank, lessons::fingerprint(*model).c_str());
  lessons::report("difference_from_ddp", d);
  lessons::report("fingerprint", lessons::fingerprint(*model));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "03_sharded_optimizer_state: %s\n", e.what());
  return 1;
}
