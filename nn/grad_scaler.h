// Loss scaling for float16 training, as torch.cuda.amp.GradScaler.
//
// float16's smallest normal value is 6.1e-5 (subnormals reach 6e-8): small gradients,
// computed in float16 under autocast, round to zero. Multiplying the loss by a large
// scale S multiplies every gradient by S on the way back, lifting them into range; the
// gradients are divided by S again (in float32) before the optimizer step. If S was too
// large and some gradient overflowed to Inf (or a NaN appeared), the step is skipped and
// S halves; after growth_interval good steps in a row, S doubles.
//
//   nn::GradScaler scaler;
//   { nn::Autocast ac(DType::Float16); loss = cross_entropy(model(x), y); }
//   scaler.scale(loss).backward();
//   scaler.step(opt);     // unscales, then steps unless a gradient is Inf/NaN
//   scaler.update();      // grows or backs off the scale
//
// As in PyTorch, each optimizer is unscaled at most once and stepped at most once between
// update()s: a second unscale_ or step() (a forgotten update(), which would step with
// gradients still multiplied by the scale) is refused, naming the call.
//
// Under DDP the check is the same on every rank: an Inf in any rank's gradient becomes an
// Inf in the averaged gradient everywhere, so every rank skips the same steps. Under FSDP
// each rank holds only its shard of the gradients: use dist::ShardedGradScaler
// (dist/sharded_grad_scaler.h), which decides for all ranks together. A
// ZeroRedundancyOptimizer can be stepped through either (it is a Steppable, steppable.h):
// in its reduce-scatter design it asks the other ranks itself.
#pragma once

#include <map>

#include "nn/optimizer.h"
#include "nn/steppable.h"

namespace engine::nn {

struct GradScalerOptions {
  double init_scale = 65536;  // 2^16
  double growth_factor = 2;
  double backoff_factor = 0.5;
  int growth_interval = 2000;
  bool enabled = true;  // false: every call passes through (scale 1, no checks)
};

class GradScaler {
 public:
  explicit GradScaler(GradScalerOptions options = {});
  virtual ~GradScaler() = default;
  // loss * scale.
  Variable scale(const Variable& loss) const;
  // Divides the optimizer's gradients by the scale (once per step) and notes whether any
  // is Inf or NaN. Call it before clipping gradients (nn/clip_grad.h); step() calls it if
  // you did not.
  void unscale_(Steppable& opt);
  // opt.step() unless the unscaled gradients held an Inf or NaN. Returns whether it stepped.
  bool step(Steppable& opt);
  // The next scale: backoff after a skipped step, growth after growth_interval good ones.
  void update();
  double get_scale() const { return scale_; }
  int skipped_steps() const { return skipped_; }

  // What a checkpoint needs to resume exactly: {"scale" (float32), "growth_tracker" (good
  // steps since the scale last changed, int64)}; empty when disabled, as PyTorch's. The
  // scale is kept in float32, as PyTorch keeps it, so it survives the round trip exactly.
  StateDict state_dict() const;
  // Refuses an empty state (saved from a disabled scaler), a scale that is not positive and
  // finite, and a tracker outside [0, growth_interval), naming the key; changes nothing then.
  void load_state_dict(const StateDict& state);

 protected:
  // Whether an Inf or NaN was found anywhere, given what this process found in its
  // gradients. One process, or DDP's replicas: its own answer. dist::ShardedGradScaler
  // asks every rank, since each holds only its shard of the gradients.
  virtual bool found_inf_anywhere(bool found_here) { return found_here; }

 private:
  GradScalerOptions options_;
  float scale_;  // float32, as PyTorch keeps it: a checkpoint's round trip is exact
  int good_steps_ = 0, skipped_ = 0;
  // Where each optimizer is since the last update(), and whether its gradients had an
  // Inf or NaN (PyTorch's per-optimizer state).
  enum class Stage { Unscaled, Stepped };
  struct State {
    Stage stage;
    bool found_inf;
  };
  std::map<const Steppable*, State> states_;
};

}  // namespace engine::nn
