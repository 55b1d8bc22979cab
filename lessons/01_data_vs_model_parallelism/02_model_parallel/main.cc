// Lesson 1, step 2: model parallelism. The MLP split across two processes (pipeline.h):
//   bazel run //lessons/01_data_vs_model_parallelism:02_model_parallel
#include <cstdio>

#include "dist/dist.h"
#include "lessons/01_data_vs_model_parallelism/pipeline.h"
#include "lessons/common/lesson.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  std::printf("rank %d holds %s\n", rank, rank == 0 ? "layer 1 (784->256)" : "layers 2-3 (256->256->10) and the loss");
  std::fflush(stdout);
  const lesson1::SplitResult r = lesson1::train_split_mlp(dist::default_group(), {.steps = 200});
  if (rank == 1)
    for (size_t s = 0; s < r.losses.size(); s += 40) std::printf("step %3zu  loss %.4f\n", s, r.losses[s]);
  if (rank == 1) std::printf("step %3zu  loss %.4f\n", r.losses.size() - 1, r.losses.back());
  if (rank == 1) lessons::report("first_loss", r.losses.front()), lessons::report("last_loss", r.losses.back());
  int64_t count = 0;
  for (auto& p : r.part->parameters()) count += p.numel();
  std::printf("rank %d trained %lld of the model's 269322 parameters\n", rank, (long long)count);
  lessons::report("parameters_trained", double(count));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "02_model_parallel: %s\n", e.what());
  return 1;
}
