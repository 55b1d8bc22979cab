// broadcast_state_dict: after it, every rank holds exactly the root's StateDict (keys,
// dtypes, shapes, bits), whatever it held before.
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/broadcast_state.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using engine::testing::ProcessGroupTCP;
using engine::testing::run_threads;

namespace {
// Rank r's own state: different keys, dtypes and shapes on every rank.
nn::StateDict state_of(int r) {
  Generator g(uint64_t(7 + r));
  nn::StateDict s;
  s["state.0.exp_avg"] = randn({2, 3 + r}, &g);
  s["state.0.step"] = full({}, double(10 * r + 1), DType::Int64);
  s["half"] = randn({5}, &g).to(DType::BFloat16);
  s["empty"] = zeros({0, 4});
  s["only_on_" + std::to_string(r)] = randn({r + 1}, &g);
  return s;
}

bool same(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.shape() == b.shape() && std::equal(a.bytes(), a.bytes() + a.nbytes(), b.bytes());
}
}  // namespace

TEST_CASE("broadcast_state_dict: every rank ends with the root's keys, dtypes, shapes and bits") {
  for (int root : {0, 2}) {
    std::vector<nn::StateDict> got(3);
    std::mutex mu;
    run_threads(3, [&](ProcessGroupTCP& g) {
      nn::StateDict s = state_of(g.rank());
      dist::broadcast_state_dict(g, &s, root);
      std::lock_guard<std::mutex> lock(mu);
      got[size_t(g.rank())] = s;
    });
    const nn::StateDict want = state_of(root);
    for (int r = 0; r < 3; ++r) {
      INFO("root " << root << ", rank " << r);
      REQUIRE(got[size_t(r)].size() == want.size());
      for (const auto& [key, t] : want) {
        INFO(key);
        REQUIRE(got[size_t(r)].count(key) == 1);
        REQUIRE(same(got[size_t(r)].at(key), t));
      }
    }
  }
}

TEST_CASE("broadcast_state_dict: an empty state empties every rank's") {
  run_threads(2, [&](ProcessGroupTCP& g) {
    nn::StateDict s = g.rank() == 1 ? nn::StateDict{} : state_of(0);
    dist::broadcast_state_dict(g, &s, 1);
    RANK_REQUIRE(s.empty());
  });
}
