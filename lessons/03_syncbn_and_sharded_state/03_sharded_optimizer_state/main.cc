// Lesson 3, step 3: sharded optimizer state (ZeRO stage 1). Adam keeps two numbers per
// parameter (the running mean and variance of the gradient): twice the model's size, and
// under DDP every rank holds all of it. ZeroRedundancyOptimizer gives rank r only shard r.
// Two ways to feed it the averaged gradient, trained here side by side with plain DDP:
//   PyTorch's pairing: the model is wrapped in DDP (backward all-reduces the gradients);
//     step() updates shard r from the averaged gradient and sends the updated shards to all.
//   the reduce-scatter design (DeepSpeed's ZeRO, FSDP): a plain model; step() reduce-scatters
//     the gradients (rank r receives the average of shard r only), updates it, all-gathers.
// Same training, 1/N of the state per rank; the bytes each sends are counted.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:03_sharded_optimizer_state
#include <cstdio>
#include <cstdlib>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/tcp_group.h"
#include "dist/zero.h"
#include "lessons/common/lesson.h"
#include "nn/adam.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

namespace {

constexpr int kSteps = 10;

// Trains `model` for kSteps on this rank's batches with `step` as the optimizer's step, and
// returns the bytes this rank sent per training step (forward, backward and update).
double train(Module& model, Optimizer* plain, dist::ZeroRedundancyOptimizer* zero, dist::ProcessGroupTCP& group) {
  const int rank = group.rank(), world = group.size();
  const uint64_t before = group.bytes_sent();
  for (int step = 0; step < kSteps; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * world + rank, 32, 0, &x, &y);  // this rank's batch
    plain ? plain->zero_grad() : zero->zero_grad();
    cross_entropy(model(Variable(x)), y).backward();
    plain ? plain->step() : zero->step();
  }
  return double(group.bytes_sent() - before) / kSteps;
}

}  // namespace

int main() try {
  // On one machine all_reduce would take shared memory, which no socket counts: the ring
  // runs here so that every byte crosses a socket and is counted.
  setenv("ENGINE_ALLREDUCE", "ring", /*overwrite=*/0);
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  auto* tcp = dynamic_cast<dist::ProcessGroupTCP*>(&dist::default_group());
  if (!tcp) throw std::runtime_error("this step counts bytes on the CPU backend (gloo)");
  std::printf("rank %d: all_reduce runs the %s here; bytes are counted as each rank sends them\n", rank,
              tcp->all_reduce_algorithm().c_str());

  // The reference: DDP and an ordinary Adam, which holds the whole state on every rank.
  auto ref = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(ref);
  Adam adam(ddp.parameters(), {.lr = 1e-3});
  const double ddp_bytes = train(ddp, &adam, nullptr, *tcp);

  // PyTorch's pairing: ZeroRedundancyOptimizer(ddp_model.parameters(), optimizer_class=Adam).
  auto paired_model = lessons::toy_mlp(0);
  dist::DistributedDataParallel paired_ddp(paired_model);
  dist::ZeroOptions paired_options;
  paired_options.adam = {.lr = 1e-3};
  paired_options.ddp_averages_gradients = true;
  dist::ZeroRedundancyOptimizer paired(paired_ddp.parameters(), dist::ZeroOptimizer::Adam, paired_options);
  const double paired_bytes = train(paired_ddp, nullptr, &paired, *tcp);

  // The reduce-scatter design: a plain model; the optimizer does the communication.
  auto model = lessons::toy_mlp(0);
  dist::ZeroOptions zo;
  zo.adam = {.lr = 1e-3};
  dist::ZeroRedundancyOptimizer zero(model->parameters(), dist::ZeroOptimizer::Adam, zo);
  const double zero_bytes = train(*model, nullptr, &zero, *tcp);

  size_t full = 0;
  for (auto& [key, t] : adam.state_dict())
    if (key.rfind("state.", 0) == 0) full += t.nbytes();
  std::printf("rank %d: Adam state %zu bytes unsharded, %zu bytes in my ZeRO shard (%.3f of it)\n", rank, full,
              zero.state_bytes(), double(zero.state_bytes()) / double(full));
  lessons::report("full_state_bytes", double(full));
  lessons::report("shard_state_bytes", double(zero.state_bytes()));
  lessons::report("paired_shard_state_bytes", double(paired.state_bytes()));

  // Bytes per step against S, the parameters' bytes: the ring all-reduce sends 2(n-1)/n S,
  // a reduce-scatter and an all-gather (n-1)/n S each.
  double params = 0;
  for (auto& p : ref->parameters()) params += double(p.numel()) * 4;
  const double unit = (world - 1.0) / world * params;
  std::printf(
      "rank %d: bytes sent per step: DDP %.0f (%.2f (n-1)/n S), PyTorch's pairing %.0f (%.2f), "
      "reduce-scatter design %.0f (%.2f)\n",
      rank, ddp_bytes, ddp_bytes / unit, paired_bytes, paired_bytes / unit, zero_bytes, zero_bytes / unit);
  lessons::report("ddp_bytes_per_step", ddp_bytes);
  lessons::report("paired_bytes_per_step", paired_bytes);
  lessons::report("zero_bytes_per_step", zero_bytes);
  lessons::report("ring_unit_bytes", unit);

  const double d_paired = lessons::max_difference(*paired_model, *ref), d = lessons::max_difference(*model, *ref);
  std::printf("rank %d: after %d steps max |parameters - DDP+Adam's|: PyTorch's pairing %.2e, reduce-scatter %.2e\n",
              rank, kSteps, d_paired, d);
  std::printf("rank %d: ZeRO parameters %s\n", rank, lessons::fingerprint(*model).c_str());
  lessons::report("paired_difference_from_ddp", d_paired);
  lessons::report("difference_from_ddp", d);
  lessons::report("fingerprint", lessons::fingerprint(*model));
  lessons::report("paired_fingerprint", lessons::fingerprint(*paired_model));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "03_sharded_optimizer_state: %s\n", e.what());
  return 1;
}
