// Lesson 2, step 8: use a DistributedSampler. Given to the DataLoader, it hands every rank
// its own slice of the dataset: the ranks' slices do not overlap, and together they cover
// it (padded by repeating a few indices, so that every rank gets as many).
//
//   bazel run //lessons/02_ddp_basics:08_use_a_distributed_sampler
#include <cstdio>
#include <map>

#include "data/dataloader.h"
#include "dist/dist.h"
#include "dist/distributed_sampler.h"
#include "lessons/common/lesson.h"
#include "tensor/ops.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();

  // A dataset of 10 examples whose input is its own index, so a batch shows which it holds.
  const int64_t n = 10;
  std::vector<float> ids;
  for (int64_t i = 0; i < n; ++i) ids.push_back(float(i));
  auto dataset = std::make_shared<data::TensorDataset>(from_vector(ids, {n, 1}), zeros({n}, DType::Int64));

  auto sampler = std::make_shared<dist::DistributedSampler>(n);  // sampler = DistributedSampler(dataset)
  data::DataLoader loader(dataset, {.batch_size = 2}, sampler);  // DataLoader(dataset, sampler=sampler)
  std::vector<int64_t> seen;
  for (const data::Example& b : loader)
    for (int64_t i = 0; i < b.input.size(0); ++i) seen.push_back(int64_t(b.input.select(0, i).item()));
  std::printf("rank %d of %d got %zu examples: %s\n", rank, world, seen.size(), lessons::join(seen).c_str());
  lessons::report("examples", lessons::join(seen));

  // Everyone's examples, on rank 0: how often was each index handed out?
  std::vector<Tensor> all;
  dist::all_gather(all, from_vector(seen));
  if (rank == 0) {
    std::map<int64_t, int> times;
    for (auto& t : all)
      for (int64_t i = 0; i < t.numel(); ++i) times[int64_t(t.select(0, i).item())]++;
    int64_t twice = 0;
    for (auto& [index, k] : times) twice += k > 1 ? k - 1 : 0;
    std::printf("together: %zu distinct examples of %lld, %lld handed out twice as padding (%d x %zu = %lld slots)\n",
                times.size(), (long long)n, (long long)twice, world, seen.size(), (long long)(world * seen.size()));
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "08_use_a_distributed_sampler: %s\n", e.what());
  return 1;
}
