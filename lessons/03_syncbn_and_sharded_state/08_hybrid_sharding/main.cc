// Lesson 3, step 8: hybrid sharding across machines. Links between machines are slower
// than within one. HYBRID_SHARD shards within each machine (FULL_SHARD among its ranks)
// and keeps one replica per machine: only the shards' gradients cross machines, in an
// all-reduce between the ranks that hold the same shard. 4 ranks here act as 2 machines
// of 2 (ranks_per_node = 2: ranks {0, 1} and {2, 3}).
//
//   bazel run //lessons/03_syncbn_and_sharded_state:08_hybrid_sharding      # 4 processes
#include <cstdio>

#include "dist/dist.h"
#include "lessons/03_syncbn_and_sharded_state/sharding.h"
#include "lessons/common/lesson.h"

using namespace engine;
using lesson3::Way;

int main() try {
  dist::ProcessGroupTCP& g = lesson3::init_counting_bytes();
  const int rank = g.rank(), world = g.size();
  ENGINE_REQUIRE(world % 2 == 0, "[08_hybrid_sharding] run it on an even number of processes (machines of 2)");
  using S = dist::ShardingStrategy;
  const lesson3::Trained ddp = lesson3::train(Way::DDP, g);
  const lesson3::Trained full = lesson3::train(Way::FSDP, g, {.sharding_strategy = S::FULL_SHARD});
  const lesson3::Trained hybrid =
      lesson3::train(Way::FSDP, g, {.sharding_strategy = S::HYBRID_SHARD, .ranks_per_node = 2});
  const double S_bytes = double(ddp.params_total);
  if (rank == 0) {
    std::printf("%d ranks as %d machines of 2, the toy MLP (S = %.0f bytes), Adam, 5 steps:\n", world, world / 2,
                S_bytes);
    for (const auto* t : {&ddp, &full, &hybrid}) std::printf("  %s\n", lesson3::describe(*t, ddp, world).c_str());
    std::printf(
        "HYBRID_SHARD: rank 0 sent %.0f bytes a step, of which %.0f to the other machine (%.2f S); "
        "FULL_SHARD over all %d ranks sends its whole %.0f through the ring, which crosses machines\n",
        hybrid.sent_per_step, hybrid.sent_across, hybrid.sent_across / S_bytes, world, full.sent_per_step);
  }
  lessons::report("hybrid_vs_ddp", lesson3::max_abs_diff(hybrid.weights, ddp.weights));
  lessons::report("hybrid_sent", hybrid.sent_per_step);
  lessons::report("hybrid_across", hybrid.sent_across);
  lessons::report("hybrid_params", double(hybrid.params));
  lessons::report("full_params", double(full.params));
  lessons::report("params_total", S_bytes);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "08_hybrid_sharding: %s\n", e.what());
  return 1;
}
