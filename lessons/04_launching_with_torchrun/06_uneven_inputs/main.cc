// Lesson 4, step 6: uneven inputs. Three ranks with 3, 5 and 4 batches of their own data.
// Without Join, rank 0 runs out after 3 steps and goes on to what comes after training (a
// barrier here) while the others are in step 4's first collective: the engine compares the calls
// and fails at once naming both (PyTorch would wait until its timeout, 30 minutes by
// default; had rank 0 exited instead, the others would name it as dead). Under a Join (PyTorch's
// torch.distributed.algorithms.Join), each step starts by counting the ranks still
// training, and a rank out of data stands in for the rest of each step with zeros, so the
// job ends; the gradient of a step is the sum over the ranks that had data, divided by the
// world size. The last rank to finish hands its weights to the others.
//
// With --momentum, the optimizer has state of its own, which the finished ranks' stopped
// updating; --after N trains N more steps on every rank after the Join, to show that the
// replicas then part (DDP's replica check stops the run at the next forward) unless the
// Join took the optimizer (--join-optimizer) and handed its state over from the last rank
// to finish, with the weights.
//
//   bazel run //lessons/04_launching_with_torchrun:06_uneven_inputs
#include <cmath>
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/join.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

namespace {
constexpr int kBatches[] = {3, 5, 4};  // rank r has kBatches[r % 3] batches of its own
constexpr int64_t kRows = 32;
constexpr double kLr = 0.05;

int batches_of(int rank) { return kBatches[rank % 3]; }

// The closed form, in one process: at step s, the ranks with a batch s add their
// gradients, and the sum is divided by the world size.
std::shared_ptr<Sequential> closed_form(int world, double momentum) {
  auto model = lessons::toy_mlp(0);
  SGD opt(model->parameters(), {.lr = kLr, .momentum = momentum});
  int steps = 0;
  for (int r = 0; r < world; ++r) steps = std::max(steps, batches_of(r));
  for (int s = 0; s < steps; ++s) {
    std::vector<Tensor> sum;
    for (int r = 0; r < world; ++r) {
      if (s >= batches_of(r)) continue;
      Tensor x, y;
      lessons::toy_batch(s, kRows, uint64_t(r), &x, &y);
      model->zero_grad();
      cross_entropy((*model)(Variable(x)), y).backward();
      auto ps = model->parameters();
      if (sum.empty())
        for (auto& p : ps) sum.push_back(zeros_like(p.data()));
      for (size_t i = 0; i < ps.size(); ++i) sum[i] = sum[i] + ps[i].grad();
    }
    auto ps = model->parameters();
    for (size_t i = 0; i < ps.size(); ++i) ps[i].set_grad(sum[i] / double(world));
    opt.step();
  }
  return model;
}
}  // namespace

int main(int argc, char** argv) try {
  bool without_join = false, join_optimizer = false;
  double momentum = 0;
  int64_t after = 0;
  Flags flags("06_uneven_inputs",
              "Three ranks with 3, 5 and 4 batches: with Join the job ends, without it the others wait.");
  flags.add("--without-join", &without_join, "train without Join (the ranks' collectives then no longer match)");
  flags.add("--momentum", &momentum, 0, 0.99, "SGD's momentum (state the optimizer keeps between steps)");
  flags.add("--after", &after, 0, 100, "steps every rank trains after the Join");
  flags.add("--join-optimizer", &join_optimizer, "give the optimizer to the Join, which hands its state over too");
  flags.parse_or_exit(argc, argv);
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  dist::DistributedDataParallel ddp(lessons::toy_mlp(0));
  SGD opt(ddp.parameters(), {.lr = kLr, .momentum = momentum});
  std::unique_ptr<dist::Join> join;
  if (!without_join && !join_optimizer) join = std::make_unique<dist::Join>(ddp);  // with Join([model]):
  if (join_optimizer) join = std::make_unique<dist::Join>(ddp, std::vector<dist::Joinable*>{}, dist::JoinSync{{&opt}});
  for (int s = 0; s < batches_of(rank); ++s) {
    Tensor x, y;
    lessons::toy_batch(s, kRows, uint64_t(rank), &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  }
  std::printf("rank %d: my %d batches are done\n", rank, batches_of(rank));
  std::fflush(stdout);
  if (without_join) {
    dist::barrier();  // the end of training; the others are still in step 4's all-reduce
    std::printf("rank %d: finished\n", rank);
    dist::destroy_process_group();
    return 0;
  }
  const int shadowed = join->finish();  // the end of the with block
  std::printf("rank %d: stood in for %d step%s with zeros; weights %s\n", rank, shadowed, shadowed == 1 ? "" : "s",
              lessons::fingerprint(ddp.module()).c_str());
  lessons::report("shadowed", shadowed);
  lessons::report("weights", lessons::fingerprint(ddp.module()));
  if (rank == 0) {
    auto reference = closed_form(world, momentum);
    const double d = lessons::max_difference(ddp.module(), *reference);
    std::printf(
        "closed form (each step: the sum of the gradients of the ranks with data, / %d): max |difference| %.3g\n",
        world, d);
    lessons::report("closed_form_difference", d);
  }
  for (int s = 0; s < after; ++s) {  // the next epoch, with a batch for every rank
    Tensor x, y;
    lessons::toy_batch(100 + s, kRows, uint64_t(rank), &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  }
  if (after > 0) {
    std::printf("rank %d: %lld more steps after the Join: weights %s\n", rank, (long long)after,
                lessons::fingerprint(ddp.module()).c_str());
    lessons::report("weights_after", lessons::fingerprint(ddp.module()));
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "06_uneven_inputs: %s\n", e.what());
  return 1;
}
