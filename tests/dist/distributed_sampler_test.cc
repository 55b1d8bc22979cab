// DistributedSampler (lesson 2, steps 8 and 9): PyTorch's padding and interleaving,
// disjoint slices that cover the data, set_epoch's reshuffle, and the warning a forgotten
// set_epoch gets.
#include <unistd.h>

#include <cstdio>
#include <functional>
#include <string>

#include "catch2/catch.hpp"
#include "dist/distributed_sampler.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using namespace engine::dist;

namespace {
// What fn writes to stderr (fd 2), through a file.
std::string stderr_of(const std::function<void()>& fn) {
  const std::string path = engine::testing::tmp_path("stderr.txt");
  std::fflush(stderr);
  const int saved = ::dup(2);
  FILE* f = std::fopen(path.c_str(), "w");
  REQUIRE(f != nullptr);
  ::dup2(::fileno(f), 2);
  fn();
  std::fflush(stderr);
  ::dup2(saved, 2);
  ::close(saved);
  std::fclose(f);
  FILE* in = std::fopen(path.c_str(), "r");
  std::string out;
  for (int c; (c = std::fgetc(in)) != EOF;) out += char(c);
  std::fclose(in);
  return out;
}
}  // namespace

TEST_CASE("DistributedSampler matches PyTorch's padding and interleaving") {
  auto take = [](int64_t n, int r, bool drop_last) {
    DistributedSampler s(n, {.num_replicas = 3, .rank = r, .shuffle = false, .drop_last = drop_last});
    return s.indices();
  };
  using I = std::vector<int64_t>;
  REQUIRE(take(10, 0, false) == I{0, 3, 6, 9});
  REQUIRE(take(10, 1, false) == I{1, 4, 7, 0});
  REQUIRE(take(10, 2, false) == I{2, 5, 8, 1});
  REQUIRE(take(10, 0, true) == I{0, 3, 6});
  REQUIRE(take(10, 1, true) == I{1, 4, 7});
  REQUIRE(take(10, 2, true) == I{2, 5, 8});
  REQUIRE(take(2, 2, false) == I{0});  // fewer examples than ranks: padding wraps around
  REQUIRE_THROWS_WITH(DistributedSampler(10, {.num_replicas = 2, .rank = 2}),
                      Catch::Contains("rank 2 is outside 0..1"));
  // Only -1 means "ask dist::"; another negative rank is an error naming it.
  REQUIRE_THROWS_WITH(DistributedSampler(10, {.num_replicas = 2, .rank = -2}),
                      Catch::Contains("rank -2 is outside 0..1"));
  // No intermediate sum overflows: 2^63 - 1 examples over 4 ranks is 2^61 each, padded to a
  // multiple of 4 past int64 (an error), and floor with drop_last (fits).
  REQUIRE_THROWS_WITH(DistributedSampler(INT64_MAX, {.num_replicas = 4, .rank = 1}),
                      Catch::Contains("dataset size 9223372036854775807 padded to a multiple of 4 replicas"));
  REQUIRE(DistributedSampler(INT64_MAX, {.num_replicas = 4, .rank = 1, .drop_last = true}).size() == INT64_MAX / 4);
}

TEST_CASE("DistributedSampler: disjoint slices that cover the data; set_epoch reshuffles for everyone") {
  const int64_t n = 103;
  auto slices = [&](int64_t epoch, bool call_set_epoch) {
    std::vector<std::vector<int64_t>> s;
    for (int r = 0; r < 4; ++r) {
      DistributedSampler ds(n, {.num_replicas = 4, .rank = r, .seed = 5});
      if (call_set_epoch) ds.set_epoch(epoch);
      s.push_back(ds.indices());
    }
    return s;
  };
  const auto e0 = slices(0, true);
  std::vector<int> seen(n, 0);
  for (auto& s : e0) {
    REQUIRE(s.size() == 26);  // ceil(103 / 4)
    for (int64_t i : s) ++seen[size_t(i)];
  }
  int padded = 0;
  for (int c : seen) {
    REQUIRE(c >= 1);  // every example is covered...
    padded += c - 1;
  }
  REQUIRE(padded == 4 * 26 - n);    // ...and only the padding repeats
  REQUIRE(slices(1, true) != e0);   // set_epoch: a new order
  REQUIRE(slices(1, false) == e0);  // forgetting set_epoch: the same order every epoch
  REQUIRE(slices(0, true) == e0);   // deterministic
}

TEST_CASE("DistributedSampler: a shuffled epoch drawn twice (set_epoch forgotten) is said once, on rank 0") {
  auto epochs = [](int rank, bool shuffle, bool set_epoch) {
    return stderr_of([&] {
      DistributedSampler s(12, {.num_replicas = 2, .rank = rank, .shuffle = shuffle});
      for (int epoch = 0; epoch < 3; ++epoch) {
        if (set_epoch) s.set_epoch(epoch);
        (void)s.order();  // looking at the order is not a pass
        (void)s.indices();
      }
    });
  };
  const std::string forgot = epochs(0, true, false);
  REQUIRE_THAT(forgot, Catch::Contains("epoch 0's order was drawn again: set_epoch() was not called") &&
                           Catch::Contains("sampler.set_epoch(epoch)"));
  REQUIRE(forgot.find("[DistributedSampler]") == forgot.rfind("[DistributedSampler]"));  // once
  REQUIRE(epochs(0, true, true).empty());
  REQUIRE(epochs(1, true, false).empty());   // rank 0 speaks for all
  REQUIRE(epochs(0, false, false).empty());  // no shuffle: the order is meant to repeat
  // A negative epoch is an epoch like any other, not "none drawn yet".
  REQUIRE(stderr_of([] {
            DistributedSampler s(12, {.num_replicas = 2, .rank = 0});
            s.set_epoch(-1);
            (void)s.indices();
          }).empty());
}
