// Lesson 1, step 1: data parallelism, by hand. Every rank holds a whole copy of the model
// and takes its own slice of each batch. The loss is a mean over the batch, so the mean of
// the ranks' gradients is exactly the gradient of the whole batch: after one all-reduce
// every copy takes the same step and the copies stay identical.
//
//   bazel run //lessons/01_data_vs_model_parallelism:01_data_parallel
#include <cstdio>

#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const int64_t batch = 64, rows = batch / world, first = rank * rows;
  ENGINE_REQUIRE(batch % world == 0, "a batch of ", batch, " does not split evenly over ", world, " ranks");

  auto model = lessons::toy_mlp(/*seed=*/0);  // the same seed: the same weights on every rank
  int64_t count = 0;
  for (auto& p : model->parameters()) count += p.numel();
  std::printf("rank %d holds the whole model (%lld parameters) and rows [%lld, %lld) of every batch of %lld\n", rank,
              (long long)count, (long long)first, (long long)(first + rows), (long long)batch);
  std::fflush(stdout);

  SGD opt(model->parameters(), {.lr = 0.05, .momentum = 0.9});
  for (int step = 0; step < 60; ++step) {
    Tensor x, y;
    lessons::toy_batch(step, batch, /*seed=*/0, &x, &y);
    opt.zero_grad();
    Variable loss = cross_entropy((*model)(Variable(x.narrow(0, first, rows))), y.narrow(0, first, rows));
    loss.backward();
    // The whole of data parallelism: average every gradient over the ranks.
    for (auto& p : model->parameters()) dist::all_reduce(p.mutable_grad(), dist::ReduceOp::Avg);

    if (step == 0) {
      // The claim, checked: the averaged gradient equals the whole batch's gradient,
      // computed here by one copy of the model on all 64 rows.
      auto whole = lessons::toy_mlp(0);
      cross_entropy((*whole)(Variable(x)), y).backward();
      const double d = lessons::max_difference(*model, *whole, /*grads=*/true);
      std::printf("rank %d: max |averaged gradient - whole-batch gradient| = %.2e\n", rank, d);
      lessons::report("gradient_difference", d);
    }
    Tensor l = from_vector(std::vector<float>{float(loss.item())});
    dist::all_reduce(l, dist::ReduceOp::Avg);
    if (rank == 0 && step % 20 == 0) std::printf("step %2d  loss %.4f\n", step, l.item());
    if (step == 0 || step == 40) lessons::report("loss_step_" + std::to_string(step), l.item());
    opt.step();
  }
  std::printf("rank %d parameters %s\n", rank, lessons::fingerprint(*model).c_str());
  lessons::report("fingerprint", lessons::fingerprint(*model));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_data_parallel: %s\n", e.what());
  return 1;
}
