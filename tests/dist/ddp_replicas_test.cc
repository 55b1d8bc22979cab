// DDP's replica check (ddp.h): a replica changed on one rank alone is named at the next
// training forward 1, 2, 4, 8, ... on every rank; a rounding-sized difference is warned
// about and mended from rank 0; check_replicas = false leaves it alone.
#include <cmath>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ddp_models.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::ddp_testing::Data;
using engine::ddp_testing::flat;
using engine::ddp_testing::mlp;
using engine::testing::ProcessGroupTCP;
using engine::testing::run_threads;

namespace {
// 2 ranks train `steps` SGD steps; before training forward `when` (1-based), `change`
// runs on rank 1. Returns each rank's error (empty if none) and final weights.
struct Run {
  std::vector<std::string> errors{2};
  std::vector<std::vector<float>> weights{2};
  std::vector<int> forwards = std::vector<int>(2, 0);  // training forwards that completed
};
Run train(int steps, int when, const std::function<void(Module&)>& change, bool check = true) {
  Run out;
  Data d;
  run_threads(2, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(1), {.group = &g, .check_replicas = check});
    SGD opt(ddp.parameters(), {.lr = 0.1});
    const size_t r = size_t(g.rank());
    try {
      for (int s = 1; s <= steps; ++s) {
        if (s == when && g.rank() == 1) change(ddp.module());
        opt.zero_grad();
        cross_entropy(ddp(Variable(d.x.narrow(0, 8 * g.rank(), 8))), d.y.narrow(0, 8 * g.rank(), 8)).backward();
        out.forwards[r] = s;
        opt.step();
      }
    } catch (const Error& e) {
      out.errors[r] = e.what();
    }
    out.weights[r] = flat(ddp.module());
  });
  return out;
}

// What rank 1 does by mistake: loads other weights into the first layer (a checkpoint
// loaded on one rank only, after wrapping).
void load_other_weights(Module& m) {
  StateDict other = mlp(2)->state_dict();
  m.load_state_dict(other);
}
}  // namespace

TEST_CASE("a checkpoint loaded on one rank after wrapping is named at the next forward, on every rank") {
  const Run run = train(3, 1, load_other_weights);
  for (const std::string& e : run.errors)
    REQUIRE_THAT(e, Catch::Contains("[DistributedDataParallel] the replicas differ at training forward 1: parameter "
                                    "\"0.weight\" on rank 1 is up to") &&
                        Catch::Contains("(4 of 4 parameters differ)") &&
                        Catch::Contains("a checkpoint loaded on some ranks only after wrapping"));
  REQUIRE(run.forwards == std::vector<int>{0, 0});  // stopped before any step
  // Without the check (PyTorch's DDP): no error, and the replicas stay apart.
  const Run unchecked = train(3, 1, load_other_weights, /*check=*/false);
  REQUIRE(unchecked.errors == std::vector<std::string>{"", ""});
  REQUIRE(unchecked.weights[0] != unchecked.weights[1]);
}

TEST_CASE("the replicas are compared at training forwards 1, 2, 4, 8: a change before forward 5 is named at 8") {
  auto bump_bias = [](Module& m) {
    Tensor b = m.parameters()[3].data();  // "2.bias"
    b.narrow(0, 0, 1).copy_(from_vector(std::vector<float>{5.0f}));
  };
  const Run run = train(10, 5, bump_bias);
  for (const std::string& e : run.errors)
    REQUIRE_THAT(e, Catch::Contains("the replicas differ at training forward 8: parameter \"2.bias\" on rank 1") &&
                        Catch::Contains("(1 of 4 parameters differ)"));
  REQUIRE(run.forwards == std::vector<int>{7, 7});
}

TEST_CASE("a NaN in one replica is named, not taken for a rounding difference") {
  const Run run = train(2, 1, [](Module& m) { m.parameters()[0].data().narrow(0, 0, 1).copy_(full({1, 6}, NAN)); });
  for (const std::string& e : run.errors) REQUIRE_THAT(e, Catch::Contains("is up to nan from rank 0's"));
}

TEST_CASE("a difference of one rounding is mended from rank 0, and training goes on with identical replicas") {
  // Machines whose kernels round differently drift apart by such amounts: not a mistake.
  const Run run = train(4, 2, [](Module& m) {
    Tensor w = m.parameters()[0].data();
    const float v = w.to_vector<float>()[0];
    w.reshape({-1}).narrow(0, 0, 1).copy_(from_vector(std::vector<float>{std::nextafter(v, 2 * v + 1)}));
  });
  REQUIRE(run.errors == std::vector<std::string>{"", ""});
  REQUIRE(run.weights[0] == run.weights[1]);
}
