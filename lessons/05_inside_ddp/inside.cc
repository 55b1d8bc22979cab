#include "lessons/05_inside_ddp/inside.h"

#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace inside {

using namespace engine;
using namespace engine::nn;

void my_rows(int step, int rank, int world, Tensor* x, Tensor* y) {
  Tensor bx, by;
  lessons::toy_batch(step, kBatch, /*seed=*/0, &bx, &by);
  // An even split, so that averaging the ranks' mean gradients (what DDP does) is the whole
  // batch's mean gradient: with 3 ranks of 21 rows, a row would be left out.
  ENGINE_REQUIRE(kBatch % world == 0, "[inside] each batch of ", kBatch,
                 " rows is split evenly over the ranks: run it on 1, 2, 4 or 8 processes (NPROC=4), got ", world);
  const int64_t rows = kBatch / world;
  *x = bx.narrow(0, rank * rows, rows);
  *y = by.narrow(0, rank * rows, rows);
}

Run baseline() {
  Run run{lessons::toy_mlp(0), {}};
  SGD opt(run.model->parameters(), sgd_options());
  for (int step = 0; step < kSteps; ++step) {
    Tensor x, y;
    my_rows(step, 0, 1, &x, &y);
    opt.zero_grad();
    Variable loss = cross_entropy((*run.model)(Variable(x)), y);
    loss.backward();
    opt.step();
    run.losses.push_back(loss.item());
  }
  return run;
}

}  // namespace inside
