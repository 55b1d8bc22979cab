// Inside DDP, step 8: the library. DistributedDataParallel is step 7 plus care: buckets
// laid out once, in shared memory where the ranks share a machine; a first small bucket
// so communication starts early; unused parameters named; no_sync; buffers broadcast.
// With the same bucket layout it computes the same bits as step 7.
//
//   bazel run //lessons/05_inside_ddp:08_the_library
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/05_inside_ddp/inside.h"
#include "lessons/05_inside_ddp/sync.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const double cap = 0.25;

  auto ours = lessons::toy_mlp(0);
  SGD opt_ours(ours->parameters(), inside::sgd_options());
  inside::BucketSync sync(ours->parameters(), dist::default_group(), cap);

  auto theirs = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(theirs, {.bucket_cap_mb = cap, .first_bucket_mb = cap});
  SGD opt(ddp.parameters(), inside::sgd_options());

  std::string a, b;
  for (auto& bucket : sync.buckets()) a += " " + std::to_string(bucket.size());
  for (auto& bucket : ddp.bucket_names()) b += " " + std::to_string(bucket.size());
  std::printf("rank %d: parameters per bucket: step 7's%s, DDP's%s\n", rank, a.c_str(), b.c_str());
  lessons::report("buckets_step7", a.substr(a.empty() ? 0 : 1));
  lessons::report("buckets_ddp", b.substr(b.empty() ? 0 : 1));

  for (int step = 0; step < inside::kSteps; ++step) {
    Tensor x, y;
    inside::my_rows(step, rank, world, &x, &y);
    opt_ours.zero_grad();
    cross_entropy((*ours)(Variable(x)), y).backward();
    sync.wait();
    opt_ours.step();
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  }
  const inside::Run base = inside::baseline();
  const double rel = lessons::relative_difference(*theirs, *base.model);
  std::printf("rank %d: step 7 %s, DDP %s; DDP vs the baseline %.2e relative\n", rank,
              lessons::fingerprint(*ours).c_str(), lessons::fingerprint(*theirs).c_str(), rel);
  lessons::report("fingerprint_step7", lessons::fingerprint(*ours));
  lessons::report("fingerprint_ddp", lessons::fingerprint(*theirs));
  lessons::report("relative_difference", rel);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "08_the_library: %s\n", e.what());
  return 1;
}
