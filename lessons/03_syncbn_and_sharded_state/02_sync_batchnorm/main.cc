// Lesson 3, step 2: SyncBatchNorm. Each rank computes its slice's count, mean and sum of
// squared deviations; one all-gather brings every rank's three numbers per feature to
// everyone, and they combine into the global batch's mean and variance. Backward needs
// two global sums per feature: one all-reduce. The result is batch norm over the global
// batch, on every rank. convert_sync_batchnorm swaps every BatchNorm in a model.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:02_sync_batchnorm
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/sync_batchnorm.h"
#include "lessons/03_syncbn_and_sharded_state/bn_data.h"
#include "lessons/common/lesson.h"
#include "nn/batchnorm.h"
#include "nn/layers.h"

using namespace engine;
using namespace engine::nn;

static std::shared_ptr<Sequential> model() {
  Generator g(5);
  return std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(3, 4, true, &g), std::make_shared<BatchNorm1d>(4)});
}

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Tensor x = lesson3::global_batch();
  const int64_t rows = x.size(0) / world;

  // model = nn.SyncBatchNorm.convert_sync_batchnorm(model); model = DDP(model)
  auto synced = dist::convert_sync_batchnorm(model());
  std::printf("rank %d: layer 1 is now %s\n", rank,
              dynamic_cast<dist::SyncBatchNorm*>(&*synced->children()[1].second) ? "SyncBatchNorm" : "BatchNorm");
  dist::DistributedDataParallel ddp(synced);
  const Tensor w = from_vector(std::vector<float>{1, -2, 3, 0.5f});  // a loss: sum(y * w)
  Variable y = ddp(Variable(x.narrow(0, rank * rows, rows)));
  sum(y * Variable(w.reshape({1, 4}))).backward();

  // One process, plain BatchNorm, the whole batch: what every rank should match. DDP
  // averages gradients, so compare with the whole batch's loss divided by world size.
  auto alone = model();
  Variable y_all = (*alone)(Variable(x));
  (sum(y_all * Variable(w.reshape({1, 4}))) * (1.0 / world)).backward();

  const double d_out = lessons::max_abs_diff(y.data(), y_all.data().narrow(0, rank * rows, rows));
  const double d_grad = lessons::max_difference(*synced, *alone, /*grads=*/true);
  std::printf("rank %d: max |output - one process's| = %.2e\n", rank, d_out);
  std::printf("rank %d: max |gradient - one process's| = %.2e\n", rank, d_grad);
  lessons::report("output_difference", d_out);
  lessons::report("gradient_difference", d_grad);
  auto* bn = dynamic_cast<BatchNorm*>(&*synced->children()[1].second);
  auto* ref = dynamic_cast<BatchNorm*>(&*alone->children()[1].second);
  const double d_var = lessons::max_abs_diff(bn->running_var, ref->running_var);
  std::printf("rank %d: max |running_var - one process's| = %.2e\n", rank, d_var);
  lessons::report("running_var_difference", d_var);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_sync_batchnorm: %s\n", e.what());
  return 1;
}
