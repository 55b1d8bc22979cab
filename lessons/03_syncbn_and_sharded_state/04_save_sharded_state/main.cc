// Lesson 3, step 4: saving sharded state. No rank holds the whole optimizer state, so a
// checkpoint first gathers it: consolidate_state_dict() collects every shard on rank 0 in
// the layout an unsharded Adam would have; rank 0 saves it beside the model. To resume,
// every rank loads the full state and keeps its own shard. Training then goes on exactly
// as if it had never stopped.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:04_save_sharded_state
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/safetensors.h"

using namespace engine;
using namespace engine::nn;

static void train(Module& model, dist::ZeroRedundancyOptimizer& opt, int from, int to) {
  const int rank = dist::get_rank(), world = dist::get_world_size();
  for (int step = from; step < to; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * world + rank, 32, 0, &x, &y);
    opt.zero_grad();
    cross_entropy(model(Variable(x)), y).backward();
    opt.step();
  }
}

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  const std::string dir = lessons::output_dir("03_syncbn_and_sharded_state");
  dist::ZeroOptions zo;
  zo.adam = {.lr = 1e-3};

  // Train 5 steps, then checkpoint: the model (identical everywhere) and the gathered state.
  auto model = lessons::toy_mlp(0);
  dist::ZeroRedundancyOptimizer opt(model->parameters(), dist::ZeroOptimizer::Adam, zo);
  train(*model, opt, 0, 5);
  const StateDict full = opt.consolidate_state_dict(/*to=*/0);  // a collective: every rank calls it
  std::printf("rank %d: consolidated state has %zu tensors here\n", rank, full.size());
  lessons::report("consolidated_tensors", double(full.size()));
  dist::save_on_rank0(dir + "/model.safetensors", model->state_dict());
  dist::save_on_rank0(dir + "/optimizer.safetensors", full);

  // Resume on every rank, into fresh objects, from the files.
  auto resumed = lessons::toy_mlp(99);
  resumed->load_state_dict(load_safetensors(dir + "/model.safetensors"));
  dist::ZeroRedundancyOptimizer opt2(resumed->parameters(), dist::ZeroOptimizer::Adam, zo);
  opt2.load_state_dict(load_safetensors(dir + "/optimizer.safetensors"));  // keeps this rank's shard

  // Both go on for 5 more steps.
  train(*model, opt, 5, 10);
  train(*resumed, opt2, 5, 10);
  std::printf("rank %d: uninterrupted %s, resumed %s\n", rank, lessons::fingerprint(*model).c_str(),
              lessons::fingerprint(*resumed).c_str());
  lessons::report("uninterrupted", lessons::fingerprint(*model));
  lessons::report("resumed", lessons::fingerprint(*resumed));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "04_save_sharded_state: %s\n", e.what());
  return 1;
}
