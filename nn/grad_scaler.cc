#include "nn/grad_scaler.h"

#include <cmath>

#include "autograd/ops.h"
#include "tensor/ops.h"

namespace engine::nn {

GradScaler::GradScaler(GradScalerOptions options) : options_(options), scale_(options.init_scale) {
  ENGINE_REQUIRE(options_.init_scale > 0 && std::isfinite(options_.init_scale),
                 "[GradScaler] init_scale must be "
                 "positive and finite, got ",
                 options_.init_scale);
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

void GradScaler::unscale_(Optimizer& opt) {
  if (!options_.enabled || unscaled_) return;
  const double inv = 1.0 / scale_;
  for (const Variable& p : opt.params()) {
    if (!p.grad().defined()) continue;
    Tensor g = p.grad();
    mul_(g, inv);
    if (!all_finite(g)) found_inf_ = true;
  }
  unscaled_ = true;
}

bool GradScaler::step(Optimizer& opt) {
  if (!options_.enabled) {
    opt.step();
    return true;
  }
  unscale_(opt);
  if (found_inf_) {
    ++skipped_;
    return false;
  }
  opt.step();
  return true;
}

void GradScaler::update() {
  if (!options_.enabled) return;
  if (found_inf_) {
    scale_ *= options_.backoff_factor;
    good_steps_ = 0;
  } else if (++good_steps_ == options_.growth_interval) {
    scale_ *= options_.growth_factor;
    good_steps_ = 0;
  }
  unscaled_ = found_inf_ = false;
}

}  // namespace engine::nn
