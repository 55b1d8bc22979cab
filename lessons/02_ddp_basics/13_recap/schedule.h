// The recap's learning rate at each optimizer step: a linear warm-up over the first
// `warmup` steps (none when 0), then cosine decay from `peak` towards 0 at the last step.
//
//   opt.set_lr(recap::learning_rate(0.1, step, epochs * steps_per_epoch, 0));
#pragma once

#include <cmath>
#include <cstdint>

namespace recap {

inline double learning_rate(double peak, int64_t step, int64_t total, int64_t warmup) {
  const double cosine = 0.5 * (1 + std::cos(M_PI * double(step) / double(total)));
  // Warm-up (Goyal et al., 2017): step i of the first W runs at (i + 1) / W of the rate.
  const double ramp = step < warmup ? double(step + 1) / double(warmup) : 1.0;
  return peak * cosine * ramp;
}

}  // namespace recap
