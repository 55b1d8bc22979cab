// PowerSGD's state in a checkpoint: a run stopped and resumed through a file ends bit for
// bit where the run that never stopped ends (its residuals, warm-start Qs and generator are
// what the resumed steps need); a state that does not fit is refused by name.
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/ddp.h"
#include "dist/powersgd.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tests/dist/ddp_models.h"
#include "tests/dist/ranks.h"
#include "tests/dist/small_mlp.h"
#include "tests/rank_assert.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::nn;
using engine::ddp_testing::flat;
using engine::testing::loss_on;
using engine::testing::run_threads;
using engine::testing::small_mlp;

namespace {

constexpr int kSteps = 10;
const PowerSGDState kSettings{.matrix_approximation_rank = 1, .start_powerSGD_iter = 2};

// Every tensor of `from` under "<prefix><key>".
void put(StateDict& into, const std::string& prefix, const StateDict& from) {
  for (const auto& [k, t] : from) into[prefix + k] = t;
}
StateDict take(const StateDict& all, const std::string& prefix) {
  StateDict out;
  for (const auto& [k, t] : all)
    if (k.rfind(prefix, 0) == 0) out[k.substr(prefix.size())] = t;
  return out;
}

// Steps [from, to) of 2-rank DDP training (small buckets: several per step) with PowerSGD.
void train(DistributedDataParallel& ddp, SGD& opt, int rank, int from, int to) {
  for (int step = from; step < to; ++step) {
    opt.zero_grad();
    loss_on(ddp, rank, step).backward();
    opt.step();
  }
}

// Rank 0's weights after kSteps; with stop_at > 0 the run saves a checkpoint after that
// step, and a new model, optimizer and PowerSGD state load it and train on, the PowerSGD
// state only when `load_powersgd`. Rank 0 saves the model and optimizer; every rank saves
// its PowerSGD state (its residuals are its own) and loads its own again.
std::vector<float> run(int stop_at, bool load_powersgd) {
  const std::string path = engine::testing::tmp_path("powersgd_resume.safetensors");
  const auto own = [](int rank) {
    return engine::testing::tmp_path("powersgd_rank" + std::to_string(rank) + ".safetensors");
  };
  std::vector<float> out;
  std::mutex mu;
  run_threads(2, [&](ProcessGroupTCP& g) {
    const DDPOptions bucketed{.bucket_cap_mb = 0.0001, .first_bucket_mb = 0.0001, .group = &g};
    auto make = [&](PowerSGDState& state, std::unique_ptr<DistributedDataParallel>& ddp) {
      ddp = std::make_unique<DistributedDataParallel>(small_mlp(), bucketed);
      ddp->register_comm_hook([&state](GradBucket& b) { return powerSGD_hook(state, b); });
    };
    PowerSGDState state = kSettings;
    std::unique_ptr<DistributedDataParallel> ddp;
    make(state, ddp);
    SGD opt(ddp->parameters(), {.lr = 0.1, .momentum = 0.9});
    if (stop_at == 0) {
      train(*ddp, opt, g.rank(), 0, kSteps);
      std::lock_guard<std::mutex> lock(mu);
      if (g.rank() == 0) out = flat(ddp->module());
      return;
    }
    train(*ddp, opt, g.rank(), 0, stop_at);
    if (stop_at > kSettings.start_powerSGD_iter) RANK_REQUIRE(state.error.size() > 1);  // a residual per bucket
    if (g.rank() == 0) {
      StateDict all;
      put(all, "model.", ddp->module().state_dict());
      put(all, "optimizer.", opt.state_dict());
      save_safetensors(path, all);
    }
    save_safetensors(own(g.rank()), state.state_dict());
    g.barrier().wait();
    // A new process would start here: everything made again, then the checkpoint loaded.
    PowerSGDState resumed = kSettings;
    std::unique_ptr<DistributedDataParallel> ddp2;
    make(resumed, ddp2);
    SGD opt2(ddp2->parameters(), {.lr = 0.1, .momentum = 0.9});
    const StateDict all = load_safetensors(path);
    ddp2->module().load_state_dict(take(all, "model."));
    opt2.load_state_dict(take(all, "optimizer."));
    if (load_powersgd) resumed.load_state_dict(load_safetensors(own(g.rank())));
    train(*ddp2, opt2, g.rank(), stop_at, kSteps);
    std::lock_guard<std::mutex> lock(mu);
    if (g.rank() == 0) out = flat(ddp2->module());
  });
  return out;
}

}  // namespace

TEST_CASE("PowerSGD resumed from a checkpoint with its state ends bit-identical to the run that never stopped") {
  const std::vector<float> straight = run(0, false);
  for (int stop_at : {1, 5}) {  // before PowerSGD starts (step 2), and while it runs
    INFO("stopped after step " << stop_at);
    REQUIRE(run(stop_at, true) == straight);
  }
  // Without its state the resumed run has no residual (what earlier steps held back is
  // lost) and draws new Qs: it ends elsewhere.
  REQUIRE(run(5, false) != straight);
}

TEST_CASE("a PowerSGD state loaded on another rank is named at the first bucket") {
  // The residuals are each rank's own: rank 0's loaded on rank 1 would be added to rank
  // 1's gradient, silently. The state records whose it is.
  std::vector<StateDict> saved(2);
  std::vector<std::string> errors(2);
  std::mutex mu;
  run_threads(2, [&](ProcessGroupTCP& g) {
    PowerSGDState state{.start_powerSGD_iter = 0};
    DistributedDataParallel ddp(small_mlp(), {.group = &g});
    ddp.register_comm_hook([&state](GradBucket& b) { return powerSGD_hook(state, b); });
    loss_on(ddp, g.rank(), 0).backward();
    {
      std::lock_guard<std::mutex> lock(mu);
      saved[size_t(g.rank())] = state.state_dict();
    }
    g.barrier().wait();
    state.load_state_dict(saved[size_t(1 - g.rank())]);  // the other rank's
    try {
      loss_on(ddp, g.rank(), 1).backward();
    } catch (const Error& e) {
      std::lock_guard<std::mutex> lock(mu);
      errors[size_t(g.rank())] = e.what();
    }
  });
  REQUIRE_THAT(errors[0], Catch::Contains("this state holds the residuals of rank 1 of 2 but is used by rank 0 of 2"));
  REQUIRE_THAT(errors[1], Catch::Contains("rank 0 of 2 but is used by rank 1 of 2"));
}

TEST_CASE("a PowerSGD state that does not fit is refused by name, and nothing changes") {
  PowerSGDState saved = kSettings;
  saved.iter = 7;
  saved.error[0] = ones({5});
  saved.qs[0] = {ones({4, 1}), ones({3, 1})};
  const StateDict good = saved.state_dict();
  const auto refused = [&](StateDict bad, const std::string& message) {
    PowerSGDState s = kSettings;
    s.iter = 3;
    REQUIRE_THROWS_WITH(s.load_state_dict(bad), Catch::Contains(message));
    REQUIRE(s.iter == 3);
    REQUIRE(s.error.empty());
  };
  PowerSGDState other = kSettings;
  other.matrix_approximation_rank = 2;
  REQUIRE_THROWS_WITH(other.load_state_dict(good),
                      Catch::Contains("saved with matrix_approximation_rank = 1, this one has 2"));
  StateDict bad = good;
  bad["iter"] = full({}, -1, DType::Int64);
  refused(bad, "\"iter\" must be one int64 >= 0");
  bad = good;
  bad["error.0"] = full({5}, NAN);
  refused(bad, "\"error.0\" holds inf or NaN");
  bad = good;
  bad.erase("q.0.0");
  refused(bad, "has no \"q.0.0\" but has \"q.0.1\"");
  bad = good;
  bad["exp_avg"] = ones({1});
  refused(bad, "unexpected key \"exp_avg\"");
  bad = good;
  bad["error.x"] = ones({5});
  refused(bad, "the bucket of \"error.x\"");
  bad = good;
  bad["rng"] = ones({4});
  refused(bad, "\"rng\" is malformed");
  bad = good;
  bad.erase("settings.warm_start");
  refused(bad, "no \"settings.warm_start\"");

  PowerSGDState loaded = kSettings;
  loaded.load_state_dict(good);
  REQUIRE(loaded.iter == 7);
  REQUIRE(loaded.qs.at(0).size() == 2);
  REQUIRE(loaded.rng.get_state().state == saved.rng.get_state().state);
  REQUIRE(loaded.rank == -1);  // saved before any bucket: no owner yet
}

TEST_CASE("a PowerSGD state from another model is named at its first bucket") {
  // A state whose residual or Q does not fit this model's bucket, as from a run of another
  // model: named, not a broadcasting error in the hook's arithmetic.
  for (bool bad_q : {false, true}) {
    INFO((bad_q ? "a Q of the wrong shape" : "a residual of the wrong size"));
    std::vector<std::string> errors(2);
    std::mutex mu;
    run_threads(2, [&](ProcessGroupTCP& g) {
      PowerSGDState state{.start_powerSGD_iter = 0};
      DistributedDataParallel ddp(small_mlp(), {.bucket_cap_mb = 25, .first_bucket_mb = 25, .group = &g});
      ddp.register_comm_hook([&state](GradBucket& b) { return powerSGD_hook(state, b); });
      loss_on(ddp, g.rank(), 0).backward();  // one step makes the state this model needs
      PowerSGDState other = state;
      if (bad_q)
        other.qs[0][0] = ones({other.qs[0][0].size(0) + 1, 1});
      else
        other.error[0] = ones({3});
      state.load_state_dict(other.state_dict());
      try {
        loss_on(ddp, g.rank(), 1).backward();
      } catch (const Error& e) {
        std::lock_guard<std::mutex> lock(mu);
        errors[size_t(g.rank())] = e.what();
      }
    });
    for (const std::string& e : errors)
      REQUIRE_THAT(e, Catch::Contains(bad_q ? "bucket 0's Q 0 is" : "bucket 0's residual holds 3 values") &&
                          Catch::Contains("loaded from a run with another model"));
  }
}
