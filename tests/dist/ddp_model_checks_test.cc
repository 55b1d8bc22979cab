// What DDP checks about the model it wraps: a model that differs between ranks is named,
// frozen layers (fine-tuning) are broadcast but never reduced, a layer frozen on one rank
// or after wrapping is named, a model is wrapped once, bucket sizes are range-checked.
#include <cmath>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tests/dist/ddp_models.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::ddp_testing::Data;
using engine::ddp_testing::flat;
using engine::ddp_testing::mlp;
using engine::testing::run_threads;

TEST_CASE("a model that differs between ranks is named at construction, even with the same element counts") {
  // Rank 1's layer is Linear(2, 3) where rank 0's is Linear(3, 2): weights (3,2) and (2,3),
  // 6 elements each, so only a comparison of shapes can tell.
  std::vector<std::string> errors(3);
  run_threads(3, [&](ProcessGroupTCP& g) {
    const bool odd = g.rank() == 1;
    auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
        std::make_shared<Linear>(4, 3), std::make_shared<Linear>(odd ? 2 : 3, odd ? 3 : 2, /*bias=*/false)});
    try {
      DistributedDataParallel ddp(model, {.group = &g});
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  for (int r = 0; r < 3; ++r)
    RANK_REQUIRE_THAT(errors[size_t(r)],
                      Catch::Contains("the model differs between ranks: parameter \"1.weight\" has shape " +
                                      std::string(r == 1 ? "(3,2)" : "(2,3)") + " on rank " + std::to_string(r)));
  // Different parameter counts are named by their range.
  run_threads(2, [&](ProcessGroupTCP& g) {
    std::vector<ModulePtr> layers{std::make_shared<Linear>(4, 3)};
    if (g.rank() == 1) layers.push_back(std::make_shared<Linear>(3, 3));
    try {
      DistributedDataParallel ddp(std::make_shared<Sequential>(layers), {.group = &g});
      errors[size_t(g.rank())] = "built";
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  RANK_REQUIRE_THAT(errors[0], Catch::Contains("parameter counts range over 2..4"));
}

TEST_CASE("a frozen layer is broadcast but never reduced, and training equals one process (fine-tuning)") {
  // The first layer frozen, as when fine-tuning a head: SGD(ddp.parameters()) as in PyTorch.
  auto freeze_first = [](std::shared_ptr<Sequential> m) {
    for (auto& [name, p] : m->named_parameters())
      if (name.rfind("0.", 0) == 0) p.set_requires_grad(false);
    return m;
  };
  Data d;
  auto single = freeze_first(mlp(1));
  const std::vector<float> first_layer = single->parameters()[0].data().to_vector<float>();
  SGD ref_opt(single->parameters(), {.lr = 0.1, .momentum = 0.9});
  for (int s = 0; s < 3; ++s) {
    ref_opt.zero_grad();
    cross_entropy((*single)(Variable(d.x.narrow(0, s * 16, 16))), d.y.narrow(0, s * 16, 16)).backward();
    ref_opt.step();
  }
  const std::vector<float> reference = flat(*single);
  std::vector<std::vector<float>> replicas(2);
  std::vector<std::vector<std::vector<std::string>>> buckets(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    // Rank 1 starts from other weights, the frozen layer included: it gets rank 0's.
    DistributedDataParallel ddp(freeze_first(mlp(g.rank() == 0 ? 1 : 50)), {.bucket_cap_mb = 0.0005, .group = &g});
    SGD opt(ddp.parameters(), {.lr = 0.1, .momentum = 0.9});
    for (int s = 0; s < 3; ++s) {
      opt.zero_grad();
      const int64_t start = s * 16 + g.rank() * 8;
      cross_entropy(ddp(Variable(d.x.narrow(0, start, 8))), d.y.narrow(0, start, 8)).backward();
      opt.step();
    }
    RANK_REQUIRE(ddp.module().parameters()[0].data().to_vector<float>() == first_layer);
    RANK_REQUIRE(!ddp.module().parameters()[0].grad().defined());
    replicas[size_t(g.rank())] = flat(ddp.module());
    buckets[size_t(g.rank())] = ddp.bucket_names();
  });
  RANK_REQUIRE(replicas[1] == replicas[0]);
  for (size_t i = 0; i < reference.size(); ++i) RANK_REQUIRE(replicas[0][i] == Approx(reference[i]).epsilon(1e-5));
  for (auto& bucket : buckets[0])
    for (auto& name : bucket) RANK_REQUIRE(name.rfind("0.", 0) != 0);  // no frozen parameter in a bucket
}

TEST_CASE("a layer frozen on one rank only, or frozen after wrapping, is named, not left to drift or hang") {
  std::vector<std::string> errors(2);
  run_threads(2, [&](ProcessGroupTCP& g) {
    auto model = mlp(1);
    if (g.rank() == 1) model->parameters()[2].set_requires_grad(false);
    try {
      DistributedDataParallel ddp(model, {.group = &g});
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  RANK_REQUIRE_THAT(errors[1], Catch::Contains("the model differs between ranks: parameter \"2.weight\" is frozen "
                                               "(requires_grad false) on rank 1 but not on another rank"));
  RANK_REQUIRE_THAT(errors[0], Catch::Contains("parameter \"2.weight\" requires grad on rank 0 but not on another"));
  run_threads(2, [&](ProcessGroupTCP& g) {
    Data d;
    DistributedDataParallel ddp(mlp(1), {.group = &g});
    ddp.module().parameters()[1].set_requires_grad(false);  // frozen after wrapping
    try {
      ddp(Variable(d.x.narrow(0, 0, 8)));
    } catch (const Error& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  for (auto& e : errors)
    RANK_REQUIRE_THAT(e, Catch::Contains("[DistributedDataParallel] parameter \"0.bias\" was frozen "
                                         "(set_requires_grad) after the model was wrapped"));
}

TEST_CASE("bucket sizes are range-checked before anything is sent") {
  for (double bad : {double(NAN), -1.0}) {
    REQUIRE_THROWS_WITH(DistributedDataParallel(mlp(1), {.bucket_cap_mb = bad}),
                        Catch::Contains("[DistributedDataParallel] bucket_cap_mb and first_bucket_mb must be >= 0"));
    REQUIRE_THROWS_WITH(DistributedDataParallel(mlp(1), {.first_bucket_mb = bad}),
                        Catch::Contains("must be >= 0 (MiB), got 25 and"));
  }
}

TEST_CASE("a model wrapped twice is named; once the first wrapper is gone, or failed, it can be wrapped again") {
  run_threads(2, [&](ProcessGroupTCP& g) {
    auto model = mlp(1);
    {
      DistributedDataParallel first(model, {.group = &g});
      RANK_REQUIRE_THROWS_WITH(DistributedDataParallel(model, {.group = &g}),
                               Catch::Contains("[DistributedDataParallel] parameter \"0.weight\" is already in "
                                               "another DistributedDataParallel: wrap a model once"));
    }
    DistributedDataParallel again(model, {.group = &g});
  });
  // A construction that failed (here: the model differs between ranks) releases the model.
  run_threads(2, [&](ProcessGroupTCP& g) {
    auto model = mlp(1);
    if (g.rank() == 1) model->parameters()[0].set_requires_grad(false);
    RANK_REQUIRE_THROWS_WITH(DistributedDataParallel(model, {.group = &g}), Catch::Contains("differs between ranks"));
    model->parameters()[0].set_requires_grad(true);
    DistributedDataParallel fixed(model, {.group = &g});
  });
}

TEST_CASE("the wrapper's state_dict() names keys \"module.<name>\"; loading it into the bare model says so") {
  run_threads(1, [&](ProcessGroupTCP& g) {
    DistributedDataParallel ddp(mlp(1), {.group = &g});
    const StateDict wrapped = ddp.state_dict();
    RANK_REQUIRE(wrapped.count("module.0.weight") == 1);
    auto bare = mlp(2);
    RANK_REQUIRE_THROWS_WITH(bare->load_state_dict(wrapped),
                             Catch::Contains("every key of the state starts with \"module.\"") &&
                                 Catch::Contains("save the wrapped model's state_dict() (ddp.module())"));
    RANK_REQUIRE_THROWS_WITH(ddp.load_state_dict(bare->state_dict()),
                             Catch::Contains("without the prefix \"module.\"") &&
                                 Catch::Contains("load it into the wrapped model (ddp.module())"));
    ddp.module().load_state_dict(bare->state_dict());  // the right way round
    RANK_REQUIRE(flat(ddp.module()) == flat(*bare));
  });
}
