// What FSDP checks about the model it wraps and how it is used: a model that differs
// between ranks is named, a layer half frozen is refused, and the wrapped model's own
// parameters (views of the units' flat buffers) cannot be optimized, clipped or wrapped
// again, nor stepped by an optimizer made before wrapping. Each is refused before anything
// is sharded, or naming what to use instead.
#include "catch2/catch.hpp"
#include "dist/fsdp.h"
#include "nn/clip_grad.h"
#include "nn/layers.h"
#include "nn/sgd.h"
#include "tests/dist/ranks.h"
#include "tests/dist/small_mlp.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::testing::run_threads;
using engine::testing::small_mlp;

TEST_CASE("a model that differs between ranks is named before anything is sharded") {
  std::vector<std::string> errors(2);
  run_threads(2, [&](ProcessGroupTCP& g) {  // weights (3,2) and (2,3): 6 elements each
    auto model = std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Linear>(g.rank() ? 2 : 3, g.rank() ? 3 : 2, /*bias=*/false)});
    try {
      FullyShardedDataParallel fsdp(model, {.group = &g});
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  RANK_REQUIRE_THAT(errors[0], Catch::Contains("[FSDP] the model differs between ranks: parameter \"0.weight\""));
  RANK_REQUIRE_THAT(errors[1], Catch::Contains("has shape (3,2) on rank 1"));
}

TEST_CASE("a layer half frozen is refused with what to do, before anything is sharded") {
  // Each layer's parameters become one flat shard: it is trained or frozen as a whole.
  std::vector<std::string> errors(2);
  std::vector<size_t> kept(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    auto model = std::make_shared<Sequential>(
        std::vector<ModulePtr>{std::make_shared<Linear>(3, 2), std::make_shared<Linear>(2, 2)});
    model->parameters()[3].set_requires_grad(false);  // 1.bias frozen, 1.weight trained
    try {
      FullyShardedDataParallel fsdp(model, {.group = &g});
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
    kept[size_t(g.rank())] = model->state_dict().size();  // no child was replaced
  });
  for (int r = 0; r < 2; ++r) {
    RANK_REQUIRE_THAT(errors[size_t(r)], Catch::Contains("[FSDP] layer \"1\" has \"bias\" frozen (requires_grad "
                                                         "false) and \"weight\" trained") &&
                                             Catch::Contains("train with DistributedDataParallel"));
    RANK_REQUIRE(kept[size_t(r)] == 4);
  }
}

TEST_CASE("an optimizer over the wrapped model's parameters, or a second FSDP, is refused") {
  // FSDP trains each unit's flat shard; the model's own parameters are views it fills in
  // and whose gradients it moves to the shard. SGD over them used to step nothing, silently.
  run_threads(2, [&](ProcessGroupTCP& g) {
    auto model = small_mlp();
    FullyShardedDataParallel fsdp(model, {.group = &g});
    RANK_REQUIRE_THROWS_WITH(SGD(model->parameters(), {.lr = 0.1}),
                             Catch::Contains("[SGD] parameter 0 is trained through another one: it is in FSDP's unit "
                                             "\"0\", which trains its flat shard: optimize fsdp.parameters()"));
    RANK_REQUIRE_THROWS_WITH(
        FullyShardedDataParallel(model, {.group = &g}),
        Catch::Contains("[FSDP] parameter \"0.module.weight\" is already trained through something "
                        "else (it is in FSDP's unit") &&
            Catch::Contains("wrap a model once"));
    RANK_REQUIRE_THROWS_WITH(clip_grad_norm_(model->parameters(), 1.0),
                             Catch::Contains("[clip_grad_norm_] parameter 0 is trained through another one") &&
                                 Catch::Contains("with FSDP, call fsdp.clip_grad_norm_"));
    SGD right(fsdp.parameters(), {.lr = 0.1});  // the shards
  });
}

TEST_CASE("an optimizer made before FSDP wrapped the model is refused at its step, in every strategy") {
  // PyTorch's rule: make the optimizer after wrapping. Made before, SGD stepped the model's
  // own parameters, which get no gradient under FSDP: training did nothing, silently.
  for (ShardingStrategy s : {ShardingStrategy::FULL_SHARD, ShardingStrategy::SHARD_GRAD_OP, ShardingStrategy::NO_SHARD})
    run_threads(2, [&](ProcessGroupTCP& g) {
      auto model = small_mlp();
      SGD early(model->parameters(), {.lr = 0.1});
      FullyShardedDataParallel fsdp(model, {.sharding_strategy = s, .group = &g});
      testing::loss_on(fsdp, g.rank(), 0).backward();
      RANK_REQUIRE_THROWS_WITH(early.step(),
                               Catch::Contains("[SGD.step] parameter 0 is trained through another one since this "
                                               "optimizer was made: it is in FSDP's unit \"0\"") &&
                                   Catch::Contains("optimize fsdp.parameters()"));
    });
}
