// Lesson 3, step 1: the problem with BatchNorm under DDP. Batch norm normalises with the
// mean and variance of the batch it sees. Under DDP each rank sees only its slice, so each
// normalises with its own statistics: not the global batch's, and different on every rank.
// With small per-rank batches those statistics are noisy, and training suffers.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:01_batchnorm_per_rank
#include <cstdio>

#include "dist/dist.h"
#include "lessons/03_syncbn_and_sharded_state/bn_data.h"
#include "lessons/common/lesson.h"
#include "nn/batchnorm.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const Tensor x = lesson3::global_batch();
  const int64_t rows = x.size(0) / world;
  const Tensor mine = x.narrow(0, rank * rows, rows);

  BatchNorm1d bn(3);  // plain batch norm: this rank's statistics only
  const Tensor y = bn(Variable(mine)).data();
  BatchNorm1d whole(3);  // what one process would compute on the whole batch
  const Tensor want = whole(Variable(x)).data().narrow(0, rank * rows, rows);

  const double my_mean = mean(mine.select(1, 0)).item(), global_mean = mean(x.select(1, 0)).item();
  std::printf("rank %d: feature 0 mean of my %lld rows %+.3f, of the global batch %+.3f\n", rank, (long long)rows,
              my_mean, global_mean);
  lessons::report("my_mean", my_mean);
  lessons::report("global_mean", global_mean);
  std::printf("rank %d: running_mean[0] after one step %+.4f (the global batch would give %+.4f)\n", rank,
              bn.running_mean.select(0, 0).item(), whole.running_mean.select(0, 0).item());
  const double d = lessons::max_abs_diff(y, want);
  std::printf("rank %d: max |my BatchNorm output - global BatchNorm output| = %.3f\n", rank, d);
  lessons::report("output_difference", d);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_batchnorm_per_rank: %s\n", e.what());
  return 1;
}
