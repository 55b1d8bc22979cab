// Lesson 3, step 6: shard the gradients (ZeRO-2). ZeRO-1 (step 3) shards Adam's state, but
// every rank still holds every gradient until the step. FSDP's SHARD_GRAD_OP reduce-scatters
// each unit's gradients as soon as backward has made them, so a rank keeps only the 1/n it
// will update. The same training as DDP; the same bytes on the wire.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:06_shard_the_gradients
#include <cstdio>

#include "dist/dist.h"
#include "lessons/03_syncbn_and_sharded_state/sharding.h"
#include "lessons/common/lesson.h"

using namespace engine;
using lesson3::Way;

int main() try {
  dist::ProcessGroupTCP& g = lesson3::init_counting_bytes();
  const int rank = g.rank(), world = g.size();
  const lesson3::Trained ddp = lesson3::train(Way::DDP, g), zero1 = lesson3::train(Way::ZeRO1, g);
  const lesson3::Trained zero2 =
      lesson3::train(Way::FSDP, g, {.sharding_strategy = dist::ShardingStrategy::SHARD_GRAD_OP});
  if (rank == 0) {
    std::printf("%d ranks, the toy MLP (S = %zu bytes of parameters), Adam, 5 steps:\n", world, ddp.params_total);
    for (const auto* t : {&ddp, &zero1, &zero2}) std::printf("  %s\n", lesson3::describe(*t, ddp, world).c_str());
  }
  const double unit = (world - 1.0) / world * double(ddp.params_total);
  for (const auto* t : {&ddp, &zero1, &zero2}) {
    const std::string k = t == &ddp ? "ddp" : t == &zero1 ? "zero1" : "zero2";
    lessons::report(k + "_vs_ddp", lesson3::max_abs_diff(t->weights, ddp.weights));
    lessons::report(k + "_sent_units", t->sent_per_step / unit);
    lessons::report(k + "_grads", double(t->grads));
    lessons::report(k + "_state", double(t->state));
  }
  lessons::report("params_total", double(ddp.params_total));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "06_shard_the_gradients: %s\n", e.what());
  return 1;
}
