#include "nn/grad_scaler.h"

#include <cmath>

#include "autograd/ops.h"
#include "tensor/ops.h"

namespace engine::nn {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(float(options.init_scale)) {
  ENGINE_REQUIRE(scale_ > 0 && std::isfinite(scale_),
                 "[GradScaler] init_scale must be positive and finite in float32, got ", options_.init_scale);
  ENGINE_REQUIRE(options_.growth_factor > 1 && std::isfinite(options_.growth_factor),
                 "[GradScaler] growth_factor must exceed 1 and be finite, got ", options_.growth_factor);
  ENGINE_REQUIRE(options_.backoff_factor > 0 && options_.backoff_factor < 1,
                 "[GradScaler] backoff_factor must be in (0, 1), got ", options_.backoff_factor);
  ENGINE_REQUIRE(options_.growth_interval >= 1, "[GradScaler] growth_interval must be at least 1, got ",
                 options_.growth_interval);
}

Variable GradScaler::scale(const Variable& loss) const {
  if (!options_.enabled) return loss;
  return loss * scale_;
}

void GradScaler::unscale_(Steppable& opt) {
  if (!options_.enabled) return;
  const auto it = states_.find(&opt);
  ENGINE_REQUIRE(it == states_.end(), "[GradScaler] unscale_() was already ",
                 it != states_.end() && it->second.stage == Stage::Stepped ? "done by step()" : "called",
                 " for this optimizer since the last update(): call update() after each step");
  // With no gradient at all (backward() forgotten, or run on the unscaled loss after a
  // zero_grad), a step would silently do nothing and update() would count it as a good
  // step; PyTorch refuses it too ("No inf checks were recorded for this optimizer").
  bool any_grad = false;
  for (const Variable& p : opt.params()) any_grad = any_grad || p.grad().defined();
  ENGINE_REQUIRE(any_grad, "[GradScaler] none of this optimizer's ", opt.params().size(),
                 " parameters has a gradient: call scaler.scale(loss).backward() before unscale_() or step()");
  const double inv = 1.0 / scale_;
  bool found_inf = false;
  for (const Variable& p : opt.params()) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    mul_(g, inv);
    if (!all_finite(g)) found_inf = true;
  }
  states_[&opt] = {Stage::Unscaled, found_inf_anywhere(opt.found_inf_in_step(found_inf))};
}

bool GradScaler::step(Steppable& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  if (states_.find(&opt) == states_.end()) unscale_(opt);
  State& state = states_.at(&opt);
  ENGINE_REQUIRE(state.stage != Stage::Stepped,
                 "[GradScaler] step() was already called for this optimizer since the last update(): call "
                 "update() after each step (without it the next step would use gradients still multiplied by "
                 "the scale)");
  state.stage = Stage::Stepped;
  if (state.found_inf) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  // Growth counts steps: an update() with no step since the last one would count a step
  // that never happened (PyTorch: "No inf checks were recorded prior to update").
  ENGINE_REQUIRE(!states_.empty(),
                 "[GradScaler] update() was called without a step() (or unscale_()) since the last update(): "
                 "call it once after each scaler.step(optimizer)");
  bool found_inf = false;  // in any optimizer's gradients
  for (const auto& [opt, state] : states_) found_inf = found_inf || state.found_inf;
  if (found_inf) {
    scale_ *= options_.backoff_factor;  // in double, rounded to float once
    good_steps_ = 0;
  } else if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  states_.clear();
}

StateDict GradScaler::state_dict() const {
  if (!options_.enabled) return {};
  return {{"scale", full({}, scale_)}, {"growth_tracker", full({}, double(good_steps_), DType::Int64)}};
}

void GradScaler::load_state_dict(const StateDict& state) {
  if (!options_.enabled) return;
  ENGINE_REQUIRE(!state.empty(),
                 "[GradScaler] the state is empty: was it saved from a disabled GradScaler (a run without float16)?");
  for (const char* key : {"scale", "growth_tracker"})
    ENGINE_REQUIRE(state.count(key) && state.at(key).numel() == 1, "[GradScaler] the state needs \"", key,
                   "\" (one value)");
  const double scale = state.at("scale").item(), tracker = state.at("growth_tracker").item();
  ENGINE_REQUIRE(scale > 0 && std::isfinite(scale), "[GradScaler] \"scale\" must be positive and finite, got ", scale);
  ENGINE_REQUIRE(tracker >= 0 && tracker < options_.growth_interval && tracker == std::floor(tracker),
                 "[GradScaler] \"growth_tracker\" must be a whole number in [0, ", options_.growth_interval, "), got ",
                 tracker);
  scale_ = float(scale);
  good_steps_ = int(tracker);
}

}  // namespace engine::nn
