// Inside DDP, step 5: naive DDP. Every rank holds the model and its half of each batch;
// after backward, one all-reduce per gradient averages it over the ranks; then every rank
// steps. This is all DDP computes; the next steps only make it faster.
//
//   bazel run //lessons/05_inside_ddp:05_naive_ddp
#include <cstdio>

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
  auto model = lessons::toy_mlp(0);
  SGD opt(model->parameters(), inside::sgd_options());
  double loss = 0;
  for (int step = 0; step < inside::kSteps; ++step) {
    Tensor x, y;
    inside::my_rows(step, rank, world, &x, &y);
    opt.zero_grad();
    Variable l = cross_entropy((*model)(Variable(x)), y);
    l.backward();
    inside::naive_sync(model->parameters(), dist::default_group());  // the whole idea
    opt.step();
    Tensor t = from_vector(std::vector<float>{float(l.item())});
    dist::all_reduce(t, dist::ReduceOp::Avg);  // the whole batch's loss: the mean of the halves'
    loss = t.item();
  }
  const inside::Run base = inside::baseline();
  const double rel = lessons::relative_difference(*model, *base.model);
  std::printf("rank %d: last loss %.6f (baseline %.6f); parameters %s; max |difference| / max |baseline| = %.2e\n",
              rank, loss, base.losses.back(), lessons::fingerprint(*model).c_str(), rel);
  lessons::report("last_loss", loss);
  lessons::report("baseline_last_loss", base.losses.back());
  lessons::report("fingerprint", lessons::fingerprint(*model));
  lessons::report("relative_difference", rel);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "05_naive_ddp: %s\n", e.what());
  return 1;
}
