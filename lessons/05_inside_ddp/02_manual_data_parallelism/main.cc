// Inside DDP, step 2: data parallelism in one process. The loss is the mean over the
// batch, so the gradient of the whole batch is the mean of the two halves' gradients:
//   d/dw (1/64) sum_64 l_i = 1/2 [ d/dw (1/32) sum_first32 l_i + d/dw (1/32) sum_last32 l_i ].
// Computing the halves separately changes only the order of the float additions.
//
//   bazel run //lessons/05_inside_ddp:02_manual_data_parallelism
#include <cstdio>

#include "lessons/05_inside_ddp/inside.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  // The whole batch's gradient at step 0, and the mean of the halves' gradients.
  auto model = lessons::toy_mlp(0);
  Tensor x, y;
  inside::my_rows(0, 0, 1, &x, &y);
  cross_entropy((*model)(Variable(x)), y).backward();
  std::vector<Tensor> whole;
  for (auto& p : model->parameters()) whole.push_back(p.grad().clone());

  std::vector<Tensor> mean(whole.size());
  for (int half = 0; half < 2; ++half) {
    model->zero_grad();
    inside::my_rows(0, half, 2, &x, &y);
    cross_entropy((*model)(Variable(x)), y).backward();
    for (size_t i = 0; i < mean.size(); ++i) {
      const Tensor g = model->parameters()[i].grad() * 0.5;
      mean[i] = half == 0 ? g : add(mean[i], g);
    }
  }
  double worst = 0, scale = 0;
  for (size_t i = 0; i < whole.size(); ++i) {
    worst = std::max(worst, lessons::max_abs_diff(mean[i], whole[i]));
    scale = std::max(scale, max(abs(whole[i])).item());
  }
  std::printf("max |mean of the halves' gradients - whole batch's| = %.2e (largest gradient %.2e)\n", worst, scale);
  lessons::report("gradient_difference", worst);
  lessons::report("largest_gradient", scale);

  // Train 20 steps this way: the same run as the baseline, to float rounding.
  auto split = lessons::toy_mlp(0);
  SGD opt(split->parameters(), inside::sgd_options());
  for (int step = 0; step < inside::kSteps; ++step) {
    opt.zero_grad();
    for (int half = 0; half < 2; ++half) {  // gradients accumulate: sum of the two halves'
      inside::my_rows(step, half, 2, &x, &y);
      (cross_entropy((*split)(Variable(x)), y) * 0.5).backward();
    }
    opt.step();
  }
  inside::Run base = inside::baseline();
  const double rel = lessons::relative_difference(*split, *base.model);
  std::printf("after %d steps: max |parameter - baseline's| / max |baseline's| = %.2e\n", inside::kSteps, rel);
  lessons::report("relative_difference", rel);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_manual_data_parallelism: %s\n", e.what());
  return 1;
}
