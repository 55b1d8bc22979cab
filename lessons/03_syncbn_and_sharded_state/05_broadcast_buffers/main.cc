// Lesson 3, step 5: broadcast_buffers. Batch norm's running mean and variance are buffers,
// not parameters: no gradient, so DDP's all-reduce never touches them, and each rank's
// copy would follow its own data. DDP's answer (broadcast_buffers=true, the default) is
// to copy rank 0's buffers to every rank at the start of each forward: the ranks agree,
// on statistics of rank 0's data alone. SyncBatchNorm updates them from the global batch.
// Three forward passes, three ways, compared with what one process computes:
//
//   bazel run //lessons/03_syncbn_and_sharded_state:05_broadcast_buffers
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/sync_batchnorm.h"
#include "lessons/03_syncbn_and_sharded_state/bn_data.h"
#include "lessons/common/lesson.h"
#include "nn/batchnorm.h"

using namespace engine;
using namespace engine::nn;

namespace {

constexpr int kForwards = 3;

std::shared_ptr<Sequential> model() {
  Generator g(5);
  return std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(3, 4, true, &g), std::make_shared<BatchNorm1d>(4)});
}

Tensor running_mean(Module& m) { return dynamic_cast<BatchNorm&>(*m.children()[1].second).running_mean; }

// One process's running mean after kForwards training forwards on `rows`.
Tensor alone_on(const Tensor& rows) {
  auto m = model();
  for (int i = 0; i < kForwards; ++i) (*m)(Variable(rows));
  return running_mean(*m);
}

// How far apart the ranks' copies of `t` are: the largest |t_r - t_0| over ranks.
double spread(const Tensor& t) {
  std::vector<Tensor> all;
  dist::all_gather(all, t);
  double d = 0;
  for (auto& a : all) d = std::max(d, lessons::max_abs_diff(a, all[0]));
  return d;
}

}  // namespace

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Tensor x = lesson3::global_batch();
  ENGINE_REQUIRE(x.size(0) % world == 0, "[05_broadcast_buffers] run it on 1, 2, 4 or 8 processes");
  const int64_t rows = x.size(0) / world;
  const Tensor mine = x.narrow(0, rank * rows, rows);
  const Tensor rank0_alone = alone_on(x.narrow(0, 0, rows)), mine_alone = alone_on(mine), global = alone_on(x);

  struct Way {
    const char* name;
    std::shared_ptr<Module> net;
    dist::DDPOptions options;
  };
  Way ways[] = {{"broadcast_buffers=true", model(), {}},
                {"broadcast_buffers=false", model(), {.broadcast_buffers = false}},
                {"SyncBatchNorm", dist::convert_sync_batchnorm(model()), {}}};
  for (Way& w : ways) {
    dist::DistributedDataParallel ddp(w.net, w.options);
    for (int i = 0; i < kForwards; ++i) ddp(Variable(mine));  // training forwards (no step needed)
    const Tensor rm = running_mean(*w.net);
    const double ranks_apart = spread(rm), vs_rank0 = lessons::max_abs_diff(rm, rank0_alone),
                 vs_mine = lessons::max_abs_diff(rm, mine_alone), vs_global = lessons::max_abs_diff(rm, global);
    std::printf(
        "rank %d %-23s running_mean[0] %7.4f | ranks apart %.1e | vs one process on: rank 0's rows "
        "%.1e, my rows %.1e, all rows %.1e\n",
        rank, w.name, rm.select(0, 0).item(), ranks_apart, vs_rank0, vs_mine, vs_global);
    const std::string key = w.name[0] == 'S' ? "sync" : w.options.broadcast_buffers ? "broadcast" : "local";
    lessons::report(key + "_ranks_apart", ranks_apart);
    lessons::report(key + "_vs_rank0", vs_rank0);
    lessons::report(key + "_vs_mine", vs_mine);
    lessons::report(key + "_vs_global", vs_global);
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "05_broadcast_buffers: %s\n", e.what());
  return 1;
}
