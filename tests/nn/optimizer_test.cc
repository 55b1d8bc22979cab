// Optimizers against PyTorch's own numbers: the expected values below were produced by
// torch.optim (1.13) on the same problem, minimising sum((p - 3)^2) from p = [1, -2].
// Also: state_dict round trips that make a resumed optimizer continue exactly.
#include <cmath>
#include <memory>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "nn/adam.h"
#include "nn/sgd.h"

using namespace engine;
using namespace engine::nn;
using autograd::Variable;
using Trace = std::vector<std::vector<float>>;

namespace {
Variable loss_of(const Variable& p) { return autograd::sum(autograd::pow(p - 3.0, 2.0)); }

Trace run(Optimizer& opt, Variable& p, int steps) {
  Trace out;
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    loss_of(p).backward();
    opt.step();
    out.push_back(p.data().to_vector<float>());
  }
  return out;
}

void require_trace(const Trace& got, const Trace& want) {
  REQUIRE(got.size() == want.size());
  for (size_t s = 0; s < got.size(); ++s)
    for (size_t k = 0; k < got[s].size(); ++k) {
      INFO("step " << s + 1 << " element " << k);
      REQUIRE(got[s][k] == Approx(want[s][k]).margin(2e-6));
    }
}

Variable start() { return Variable(tensor({1, -2}), true); }

// SGD (lr 0.1) or Adam (its defaults) over `params`, for the cases run with both.
std::unique_ptr<Optimizer> sgd_or_adam(bool adam, std::vector<Variable> params) {
  if (adam) return std::make_unique<Adam>(std::move(params), AdamOptions{});
  return std::make_unique<SGD>(std::move(params), SGDOptions{.lr = 0.1});
}
}  // namespace

TEST_CASE("Adam, Adam with L2 weight decay, and AdamW step as torch.optim does") {
  {
    Variable p = start();
    Adam opt({p}, {.lr = 0.1});
    require_trace(run(opt, p, 3), {{1.1000000f, -1.9000000f}, {1.1998335f, -1.8000578f}, {1.2993766f, -1.7002133f}});
  }
  {
    Variable p = start();
    Adam opt({p}, {.lr = 0.1, .weight_decay = 0.5});
    require_trace(run(opt, p, 3), {{1.1000000f, -1.9000000f}, {1.1997385f, -1.8000665f}, {1.2990099f, -1.7002459f}});
  }
  {
    Variable p = start();
    AdamW opt({p}, {.lr = 0.1, .weight_decay = 0.5});
    require_trace(run(opt, p, 3), {{1.0500000f, -1.8000000f}, {1.0974259f, -1.6101271f}, {1.1423606f, -1.4299572f}});
  }
}

TEST_CASE("SGD with Nesterov momentum and weight decay steps as torch.optim does") {
  Variable p = start();
  SGD opt({p}, {.lr = 0.1, .momentum = 0.9, .weight_decay = 0.5, .nesterov = true});
  require_trace(run(opt, p, 3), {{1.6650000f, 0.0900000f}, {2.2976251f, 2.0782499f}, {2.7502406f, 3.5007563f}});
}

TEST_CASE("state_dict round trip: a restored optimizer continues exactly") {
  for (int kind = 0; kind < 2; ++kind) {
    Variable a = start(), b = start();
    auto make = [&](Variable& p) -> std::unique_ptr<Optimizer> {
      if (kind == 0) return std::make_unique<Adam>(std::vector<Variable>{p}, AdamOptions{.lr = 0.1});
      return std::make_unique<SGD>(std::vector<Variable>{p}, SGDOptions{.lr = 0.05, .momentum = 0.9});
    };
    auto oa = make(a);
    run(*oa, a, 2);
    const StateDict saved = oa->state_dict();
    // b: same parameter values, a fresh optimizer, then the saved state.
    Tensor(b.data()).copy_(a.data());
    auto ob = make(b);
    ob->load_state_dict(saved);
    REQUIRE(run(*oa, a, 3) == run(*ob, b, 3));
  }
  Variable p = start();
  Adam opt({p}, {.lr = 0.1});
  run(opt, p, 1);
  StateDict s = opt.state_dict();
  REQUIRE(s.count("state.0.exp_avg") == 1);
  REQUIRE(s.at("state.0.step").item() == 1);
  REQUIRE(s.at("param_groups.0.lr").item() == Approx(0.1));
  StateDict wrong = s;
  wrong["state.0.exp_avg"] = zeros({3});
  REQUIRE_THROWS_WITH(opt.load_state_dict(wrong), Catch::Contains("shape mismatch for \"state.0.exp_avg\""));
  StateDict extra = s;
  extra["state.7.exp_avg"] = zeros({2});
  REQUIRE_THROWS_WITH(opt.load_state_dict(extra), Catch::Contains("unexpected key \"state.7.exp_avg\""));
  StateDict missing = s;
  missing.erase("param_groups.0.lr");
  REQUIRE_THROWS_WITH(opt.load_state_dict(missing), Catch::Contains("missing key \"param_groups.0.lr\""));
  REQUIRE(opt.state_dict().at("state.0.step").item() == 1);  // the failed loads changed nothing
}

TEST_CASE("optimizer arguments are checked") {
  Variable p = start();
  REQUIRE_THROWS_WITH(Adam({p}, {.beta1 = 1.0}), Catch::Contains("[Adam] betas must be in [0, 1)"));
  REQUIRE_THROWS_WITH(SGD({Variable()}, {}), Catch::Contains("[SGD] parameter 0 is undefined"));
  REQUIRE_THROWS_WITH(SGD({p}, {.nesterov = true}), Catch::Contains("Nesterov momentum needs momentum > 0"));
  // Every hyperparameter finite and in range (PyTorch lets an infinite lr or a NaN decay through).
  const double inf = INFINITY, nan = NAN;
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = inf}), Catch::Contains("[SGD] learning rate must be in [0, 1e+06], got inf"));
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = 0.1, .weight_decay = nan}), Catch::Contains("[SGD] weight_decay must be in"));
  REQUIRE_THROWS_WITH(SGD({p}, {.lr = 0.1, .momentum = 0.9, .dampening = 2}), Catch::Contains("[SGD] dampening"));
  REQUIRE_THROWS_WITH(Adam({p}, {.weight_decay = -1}), Catch::Contains("[Adam] weight_decay must be in [0, 1e+06]"));
  REQUIRE_THROWS_WITH(AdamW({p}, {.lr = nan}), Catch::Contains("[AdamW] learning rate must be in"));
  SGD ok({p}, {.lr = 0.1});
  REQUIRE_THROWS_WITH(ok.set_lr(nan), Catch::Contains("[SGD] learning rate must be in [0, 1e+06], got nan"));
  REQUIRE(ok.lr() == 0.1);
  // The parameter list: not empty, leaves only, each once (PyTorch refuses the first two).
  REQUIRE_THROWS_WITH(SGD({}, {}), Catch::Contains("[SGD] got an empty parameter list"));
  REQUIRE_THROWS_WITH(SGD({p * 2.0}, {}), Catch::Contains("[SGD] parameter 0 is not a leaf: it was computed by mul"));
  Variable q = start();
  REQUIRE_THROWS_WITH(Adam({p, q, p}, {}), Catch::Contains("[Adam] parameter 2 is parameter 0 again"));
}

TEST_CASE("a frozen parameter (requires_grad false) is accepted and left alone, as torch.optim does") {
  // Fine-tuning: SGD(model.parameters()) with some layers frozen.
  for (bool adam : {false, true}) {
    Variable frozen(tensor({5, 6}), false), p = start();
    std::unique_ptr<Optimizer> opt = sgd_or_adam(adam, {frozen, p});
    for (int s = 0; s < 2; ++s) {
      opt->zero_grad();
      autograd::sum(frozen * p).backward();
      opt->step();
    }
    REQUIRE(frozen.data().to_vector<float>() == std::vector<float>{5, 6});
    REQUIRE(p.data().to_vector<float>() != std::vector<float>{1, -2});
    REQUIRE(opt->state_dict().count("state.0." + std::string(adam ? "exp_avg" : "momentum_buffer")) == 0);
  }
}

TEST_CASE("a checkpoint's hyperparameters and step counts are range-checked, and a bad one changes nothing") {
  Variable p = start();
  Adam opt({p}, {.lr = 0.01});
  loss_of(p).backward();
  opt.step();
  const StateDict good = opt.state_dict();
  StateDict bad_lr = good, bad_step = good;
  bad_lr["param_groups.0.lr"] = scalar_tensor(NAN);
  bad_step["state.0.step"] = scalar_tensor(-1);
  Adam other({start()}, {.lr = 0.5});
  REQUIRE_THROWS_WITH(other.load_state_dict(bad_lr),
                      Catch::Contains("[Adam] learning rate must be in [0, 1e+06], got nan"));
  REQUIRE_THROWS_WITH(other.load_state_dict(bad_step),
                      Catch::Contains("\"state.0.step\" must be a whole number of steps >= 0, got -1"));
  REQUIRE(other.lr() == 0.5);  // nothing was taken from either
  REQUIRE(other.state_dict().count("state.0.step") == 0);
  other.load_state_dict(good);
  REQUIRE(other.lr() == Approx(0.01));
}

TEST_CASE("a checkpoint's state tensors: whole per parameter, non-negative squares, taken as the parameter's dtype") {
  Variable p = start();
  Adam opt({p}, {.lr = 0.01});
  loss_of(p).backward();
  opt.step();
  const StateDict good = opt.state_dict();
  StateDict partial = good, negative = good, other_dtypes = good;
  partial.erase("state.0.exp_avg_sq");
  negative["state.0.exp_avg_sq"] = tensor({0.5, -0.25});
  Adam other({start()}, {.lr = 0.5});
  REQUIRE_THROWS_WITH(other.load_state_dict(partial),
                      Catch::Contains("[Adam.load_state_dict] the state has \"state.0.exp_avg\" but not "
                                      "\"state.0.exp_avg_sq\": a parameter's state is saved whole"));
  REQUIRE_THROWS_WITH(other.load_state_dict(negative),
                      Catch::Contains("\"state.0.exp_avg_sq\" holds -0.25: a running mean of squared gradients is "
                                      "never negative"));
  REQUIRE(other.lr() == 0.5);
  REQUIRE(other.state_dict().count("state.0.exp_avg") == 0);
  // Written by another tool in other dtypes (PyTorch casts state to the parameter's): the
  // run continues as from the same values in float32 and int64.
  other_dtypes["state.0.step"] = good.at("state.0.step").to(DType::Float32);
  other_dtypes["state.0.exp_avg"] = good.at("state.0.exp_avg").to(DType::BFloat16);
  StateDict same_values = good;
  same_values["state.0.exp_avg"] = other_dtypes.at("state.0.exp_avg").to(DType::Float32);
  Variable q(p.data().clone(), true), r(p.data().clone(), true);
  Adam resumed({q}, {.lr = 0.01}), reference({r}, {.lr = 0.01});
  resumed.load_state_dict(other_dtypes);
  reference.load_state_dict(same_values);
  REQUIRE(resumed.state_dict().at("state.0.step").dtype() == DType::Int64);
  REQUIRE(resumed.state_dict().at("state.0.exp_avg").dtype() == DType::Float32);
  REQUIRE(run(resumed, q, 3) == run(reference, r, 3));
}

TEST_CASE("a gradient that does not match its parameter is named at step(), not broadcast into the update") {
  for (bool adam : {false, true}) {
    Variable w(tensor({1, 2}), true);
    std::unique_ptr<Optimizer> opt = sgd_or_adam(adam, {w});
    const std::string name = adam ? "[Adam.step]" : "[SGD.step]";
    w.mutable_grad() = ones({1});  // a (1,) gradient would be added to both elements
    REQUIRE_THROWS_WITH(opt->step(),
                        Catch::Contains(name + " parameter 0 is (2,) float32 on cpu but its grad() is "
                                               "(1,) float32 on cpu: a gradient must match its parameter"));
    w.mutable_grad() = ones({2}).to(DType::Int64);
    REQUIRE_THROWS_WITH(opt->step(), Catch::Contains("its grad() is (2,) int64 on cpu"));
    REQUIRE(w.data().to_vector<float>() == std::vector<float>{1, 2});  // untouched
  }
}

TEST_CASE("a step between the forward and its backward is named, not turned into a wrong gradient") {
  // for batch: loss = f(w); opt.step(); loss.backward()   (PyTorch: "one of the variables
  // needed for gradient computation has been modified by an inplace operation")
  for (bool adam : {false, true}) {
    Variable w(tensor({1, 2}), true);
    std::unique_ptr<Optimizer> opt = sgd_or_adam(adam, {w});
    sum(w * w).backward();
    Variable loss = sum(w * w);
    opt->step();
    REQUIRE_THROWS_WITH(loss.backward(),
                        Catch::Contains("modified in place after the forward that used it (an "
                                        "optimizer step(), load_state_dict or copy_ before backward()?)"));
    opt->zero_grad();
    sum(w * w).backward();  // the usual order works
    opt->step();
  }
}
