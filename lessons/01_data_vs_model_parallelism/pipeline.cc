#include "lessons/01_data_vs_model_parallelism/pipeline.h"

#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

namespace lesson1 {

using namespace engine;
using namespace engine::nn;

SplitResult train_split_mlp(dist::ProcessGroup& group, const SplitOptions& o) {
  ENGINE_REQUIRE(group.size() == 2, "[train_split_mlp] needs exactly 2 ranks, got ", group.size());
  const int rank = group.rank();
  auto full = lessons::toy_mlp(o.seed);
  // Rank 0 keeps layers 0-1 (Linear 784->256, ReLU); rank 1 keeps layers 2-4.
  std::vector<ModulePtr> mine;
  for (size_t i = rank == 0 ? 0 : 2; i < (rank == 0 ? 2u : 5u); ++i) mine.push_back((*full)[i]);
  auto part = std::make_shared<Sequential>(mine);
  SGD opt(part->parameters(), {.lr = o.lr, .momentum = 0.9});
  SplitResult result;
  result.part = part;
  for (int step = 0; step < o.steps; ++step) {
    Tensor x, y;
    lessons::toy_batch(step, o.batch, o.seed, &x, &y);
    opt.zero_grad();
    if (rank == 0) {
      // Forward my layer, send the activation; later receive its gradient and finish
      // backward through my layer.
      Variable h = (*part)(Variable(x));
      group.send(h.data().contiguous(), 1).wait();
      Tensor dh = empty(h.shape());
      group.recv(dh, 1).wait();
      h.backward(dh);
    } else {
      // Receive the activation as a leaf that requires grad: backward stops there and
      // leaves d loss / d activation in its .grad, which goes back to rank 0.
      Tensor h_in = empty({o.batch, 256});
      group.recv(h_in, 0).wait();
      Variable h(h_in, /*requires_grad=*/true);
      Variable loss = cross_entropy((*part)(h), y);
      loss.backward();
      group.send(h.grad(), 0).wait();
      result.losses.push_back(loss.item());
    }
    opt.step();
  }
  return result;
}

}  // namespace lesson1
