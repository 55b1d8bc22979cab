// Inside DDP, step 6: start each all-reduce from the gradient-ready hook. Backward
// computes the last layer's gradients first; the moment one is complete its all-reduce can
// start, while backward goes on with the earlier layers. Same arithmetic as step 5, so
// the same bits, but the communication now overlaps the computation: the trace shows it.
//
//   bazel run //lessons/05_inside_ddp:06_hooks
#include <cstdio>

#include "dist/dist.h"
#include "lessons/05_inside_ddp/inside.h"
#include "lessons/05_inside_ddp/sync.h"
#include "lessons/common/lesson.h"
#include "lessons/common/trace.h"
#include "lessons/common/tracing_group.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const std::string dir = lessons::output_dir("05_inside_ddp");
  lessons::Trace trace(rank);
  lessons::TracingGroup traced(dist::default_group(), trace);

  auto naive = lessons::toy_mlp(0), hooked = lessons::toy_mlp(0);
  SGD opt_naive(naive->parameters(), inside::sgd_options()), opt(hooked->parameters(), inside::sgd_options());
  inside::HookSync sync(hooked->parameters(), traced);
  int64_t last_grad = 0;  // when backward completes the first layer's weight, its last gradient
  hooked->parameters()[0].register_post_accumulate_grad_hook([&](Variable&) { last_grad = lessons::now_us(); });
  for (int step = 0; step < inside::kSteps; ++step) {
    Tensor x, y;
    inside::my_rows(step, rank, world, &x, &y);
    // Step 5's way, for comparison.
    opt_naive.zero_grad();
    cross_entropy((*naive)(Variable(x)), y).backward();
    inside::naive_sync(naive->parameters(), dist::default_group());
    opt_naive.step();
    // Hooks: the all-reduces start during backward.
    opt.zero_grad();
    Variable loss = cross_entropy((*hooked)(Variable(x)), y);
    const int64_t b0 = lessons::now_us();
    loss.backward();
    sync.wait();
    const int64_t b1 = lessons::now_us();
    trace.add({"backward + wait", "compute", rank, 0, b0, b1 - b0});
    trace.add({"gradients computed", "compute", rank, 2, b0, last_grad - b0});
    opt.step();
  }
  std::printf("rank %d: naive %s, hooks %s; %d all-reduces in %d steps\n", rank, lessons::fingerprint(*naive).c_str(),
              lessons::fingerprint(*hooked).c_str(), traced.collectives(), inside::kSteps);
  trace.write_merged(dir + "/hooks_trace.json", dist::default_group());
  if (rank == 0) std::printf("trace written to %s/hooks_trace.json\n", dir.c_str());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "06_hooks: %s\n", e.what());
  return 1;
}
