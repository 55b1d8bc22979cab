// Lesson 2, step 15: gradient accumulation with no_sync(). A batch too big for memory is
// cut into k micro-batches; their gradients add up in .grad over k backwards, and one
// optimizer step follows. Under DDP every backward would all-reduce; inside no_sync() the
// first k-1 only accumulate locally, and the k-th averages the sum over the ranks: one
// all-reduce per step instead of k, the same gradient.
//
//   bazel run //lessons/02_ddp_basics:15_accumulate_with_no_sync
#include <cstdio>
#include <cstdlib>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/tcp_group.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

namespace {

constexpr int kSteps = 10, kMicro = 4;  // optimizer steps; micro-batches per step
constexpr int64_t kRows = 64;           // rows per rank per optimizer step

enum class Way { BigBatch, AccumulateSyncEvery, AccumulateNoSync };

// Trains a fresh toy MLP under DDP one of three ways; returns the bytes this rank sent per
// optimizer step, and the trained model in *out.
double train(Way way, dist::ProcessGroupTCP& group, std::shared_ptr<Sequential>* out) {
  auto model = lessons::toy_mlp(0);
  // The count is of the gradients' bytes alone: DDP's replica check (a few bytes at
  // forwards 1, 2, 4, ..., which differ in number between the three ways) is left out.
  dist::DistributedDataParallel ddp(model, {.check_replicas = false});
  SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  const uint64_t before = group.bytes_sent();
  for (int step = 0; step < kSteps; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * group.size() + group.rank(), kRows, 0, &x, &y);  // this rank's rows
    opt.zero_grad();
    if (way == Way::BigBatch) {
      cross_entropy(ddp(Variable(x)), y).backward();
    } else {
      const int64_t m = kRows / kMicro;
      for (int i = 0; i < kMicro; ++i) {
        // Each micro-batch's mean loss / k: the k gradients add up to the big batch's mean.
        auto micro = [&] {
          (cross_entropy(ddp(Variable(x.narrow(0, i * m, m))), y.narrow(0, i * m, m)) * (1.0 / kMicro)).backward();
        };
        if (way == Way::AccumulateNoSync && i < kMicro - 1) {
          auto hold = ddp.no_sync();  // this backward only adds into .grad
          micro();
        } else {
          micro();  // all-reduces what .grad holds: the sum so far
        }
      }
    }
    opt.step();
  }
  *out = model;
  return double(group.bytes_sent() - before) / kSteps;
}

}  // namespace

int main() try {
  // On one machine all_reduce would take shared memory, where no socket counts bytes: the
  // ring runs here so that every byte sent is counted.
  setenv("ENGINE_ALLREDUCE", "ring", /*overwrite=*/0);
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  auto* tcp = dynamic_cast<dist::ProcessGroupTCP*>(&dist::default_group());
  if (!tcp) throw std::runtime_error("this step counts bytes on the CPU backend (gloo)");
  if (rank == 0)
    std::printf("all_reduce runs the %s; bytes are counted as each rank sends them\n",
                tcp->all_reduce_algorithm().c_str());

  std::shared_ptr<Sequential> big, every, held;
  const double big_bytes = train(Way::BigBatch, *tcp, &big);
  const double every_bytes = train(Way::AccumulateSyncEvery, *tcp, &every);
  const double held_bytes = train(Way::AccumulateNoSync, *tcp, &held);
  const double d_every = lessons::relative_difference(*every, *big), d_held = lessons::relative_difference(*held, *big);
  if (rank == 0) {
    std::printf("%d steps of %lld rows per rank; bytes rank 0 sent per optimizer step:\n", kSteps, (long long)kRows);
    std::printf("  one batch of %lld rows                     %9.0f\n", (long long)kRows, big_bytes);
    std::printf("  %d micro-batches, all-reduce after each    %9.0f  (weights vs one batch: %.1e)\n", kMicro,
                every_bytes, d_every);
    std::printf("  %d micro-batches, the first %d in no_sync() %9.0f  (weights vs one batch: %.1e)\n", kMicro,
                kMicro - 1, held_bytes, d_held);
    if (every_bytes > 0)
      std::printf("no_sync() sends %.2f of what syncing every micro-batch sends: one all-reduce per step, not %d\n",
                  held_bytes / every_bytes, kMicro);
    else
      std::printf("on 1 rank nothing is sent either way (there is nothing to average): run it on 2 or more\n");
  }
  lessons::report("big_bytes", big_bytes);
  lessons::report("every_bytes", every_bytes);
  lessons::report("no_sync_bytes", held_bytes);
  lessons::report("every_vs_big", d_every);
  lessons::report("no_sync_vs_big", d_held);
  lessons::report("fingerprint", lessons::fingerprint(*held));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "15_accumulate_with_no_sync: %s\n", e.what());
  return 1;
}
