// Datasets, samplers and the DataLoader: every sample exactly once per epoch, with and
// without drop_last; the same order for the same seed; a new order each epoch.
#include <algorithm>
#include <climits>
#include <set>

#include "catch2/catch.hpp"
#include "data/dataloader.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::data;

namespace {
// Example i has input [i, 10 i] and target i, so a batch tells which examples it holds.
std::shared_ptr<TensorDataset> numbered(int64_t n) {
  Tensor idx = arange(0, double(n));
  Tensor inputs = stack({idx, idx * 10.0}).transpose(0, 1).contiguous();
  return std::make_shared<TensorDataset>(inputs, arange(0, double(n), 1, DType::Int64));
}

std::vector<int64_t> epoch_order(DataLoader& loader, std::vector<int64_t>* batch_sizes = nullptr) {
  std::vector<int64_t> seen;
  for (const Example& b : loader) {
    REQUIRE(b.input.size(0) == b.target.size(0));
    for (int64_t k = 0; k < b.target.size(0); ++k) {
      const int64_t i = int64_t(b.target.at({k}));
      REQUIRE(b.input.at({k, 1}) == 10.0 * double(i));  // input and target stay paired
      seen.push_back(i);
    }
    if (batch_sizes) batch_sizes->push_back(b.target.size(0));
  }
  return seen;
}
}  // namespace

TEST_CASE("TensorDataset hands out paired examples and batches") {
  auto ds = numbered(5);
  REQUIRE(ds->size() == 5);
  REQUIRE(ds->get(3).input.to_vector<float>() == std::vector<float>{3, 30});
  REQUIRE(ds->get(3).target.item() == 3);
  Example b = ds->get_batch({4, 0});
  REQUIRE(b.input.shape() == Shape{2, 2});
  REQUIRE(b.target.to_vector<int64_t>() == std::vector<int64_t>{4, 0});
  REQUIRE_THROWS_WITH(ds->get(5), Catch::Contains("[Dataset] index 5 is out of range for a dataset of 5 examples"));
  REQUIRE_THROWS_WITH(TensorDataset(zeros({3, 2}), zeros({4})),
                      Catch::Contains("inputs have 3 examples but targets have 4"));
  REQUIRE_THROWS_WITH(stack({zeros({2}), zeros({3})}), Catch::Contains("[stack] tensor 1 has shape (3,)"));
}

TEST_CASE("sequential loading visits every example once, in order, with a short last batch") {
  DataLoader loader(numbered(10), {.batch_size = 4});
  REQUIRE(loader.size() == 3);
  std::vector<int64_t> sizes;
  const auto order = epoch_order(loader, &sizes);
  REQUIRE(order == std::vector<int64_t>{0, 1, 2, 3, 4, 5, 6, 7, 8, 9});
  REQUIRE(sizes == std::vector<int64_t>{4, 4, 2});
}

TEST_CASE("drop_last drops only the short final batch") {
  DataLoader loader(numbered(10), {.batch_size = 4, .drop_last = true});
  REQUIRE(loader.size() == 2);
  std::vector<int64_t> sizes;
  const auto order = epoch_order(loader, &sizes);
  REQUIRE(sizes == std::vector<int64_t>{4, 4});
  REQUIRE(order.size() == 8);
  REQUIRE(std::set<int64_t>(order.begin(), order.end()).size() == 8);
  DataLoader tiny(numbered(3), {.batch_size = 4, .drop_last = true});
  REQUIRE(epoch_order(tiny).empty());
}

TEST_CASE("shuffling: a permutation each epoch, new every epoch, reproducible by seed") {
  DataLoader a(numbered(50), {.batch_size = 7, .shuffle = true, .seed = 11});
  DataLoader b(numbered(50), {.batch_size = 7, .shuffle = true, .seed = 11});
  DataLoader c(numbered(50), {.batch_size = 7, .shuffle = true, .seed = 12});
  const auto a1 = epoch_order(a), a2 = epoch_order(a), b1 = epoch_order(b), c1 = epoch_order(c);
  std::vector<int64_t> sorted = a1;
  std::sort(sorted.begin(), sorted.end());
  for (int64_t i = 0; i < 50; ++i) REQUIRE(sorted[i] == i);  // every example exactly once
  REQUIRE(a1 == b1);                                         // same seed, same order
  REQUIRE(a1 != a2);                                         // a new order for the next epoch
  REQUIRE(a1 != c1);                                         // another seed, another order
  std::vector<int64_t> identity(50);
  for (int64_t i = 0; i < 50; ++i) identity[i] = i;
  REQUIRE(a1 != identity);
}

TEST_CASE("a custom sampler decides the order; shuffle and sampler together is an error") {
  struct EvensFirst : Sampler {
    std::vector<int64_t> indices() override { return {0, 2, 4, 1, 3}; }
    int64_t size() const override { return 5; }
  };
  DataLoader loader(numbered(5), {.batch_size = 2}, std::make_shared<EvensFirst>());
  REQUIRE(epoch_order(loader) == std::vector<int64_t>{0, 2, 4, 1, 3});
  REQUIRE_THROWS_WITH(DataLoader(numbered(5), {.shuffle = true}, std::make_shared<EvensFirst>()),
                      Catch::Contains("either shuffle=true or a sampler"));
  REQUIRE_THROWS_WITH(DataLoader(numbered(5), {.batch_size = 0}), Catch::Contains("batch_size must be positive"));
  REQUIRE_THROWS_WITH(RandomSampler(-1), Catch::Contains("[RandomSampler] dataset size must be >= 0, got -1"));
  REQUIRE_THROWS_WITH(SequentialSampler(-3), Catch::Contains("[SequentialSampler] dataset size must be >= 0, got -3"));
  struct Miscounted : Sampler {  // a sampler of one's own whose size() disagrees with its list
    std::vector<int64_t> indices() override { return {0, 1}; }
    int64_t size() const override { return 5; }
  };
  DataLoader miscounted(numbered(5), {.batch_size = 2}, std::make_shared<Miscounted>());
  REQUIRE_THROWS_WITH(miscounted.begin(),
                      Catch::Contains("[DataLoader] the sampler's indices() gave 2 indices but its size() says 5"));
}

TEST_CASE("a batch_size near INT64_MAX is one batch of everything (no overflowing sum)") {
  DataLoader loader(numbered(5), {.batch_size = INT64_MAX});
  REQUIRE(loader.size() == 1);
  std::vector<int64_t> sizes;
  REQUIRE(epoch_order(loader, &sizes) == std::vector<int64_t>{0, 1, 2, 3, 4});
  REQUIRE(sizes == std::vector<int64_t>{5});
  DataLoader dropping(numbered(5), {.batch_size = INT64_MAX - 1, .drop_last = true});
  REQUIRE(dropping.size() == 0);
  REQUIRE(epoch_order(dropping).empty());
}

TEST_CASE("random_permutation is a uniform shuffle") {
  Generator g(0);
  // Over many draws, each value lands in each position about equally often.
  const int n = 5, draws = 20000;
  std::vector<std::vector<int>> counts(n, std::vector<int>(n, 0));
  for (int d = 0; d < draws; ++d) {
    const auto p = random_permutation(n, g);
    for (int pos = 0; pos < n; ++pos) ++counts[pos][p[pos]];
  }
  for (auto& row : counts)
    for (int c : row) REQUIRE(std::abs(c - draws / n) < 300);  // ~4 sigma for p = 1/5
}
