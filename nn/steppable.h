// Steppable: what a GradScaler (grad_scaler.h) can step: anything that updates parameters
// from their .grad with step(). Every Optimizer is one; so is dist::ZeroRedundancyOptimizer,
// which is not an Optimizer (it steps a shard) but is stepped through a scaler the same way.
//
//   nn::GradScaler scaler;
//   scaler.scale(loss).backward();
//   scaler.step(opt);    // opt: an nn::SGD, an nn::Adam, a ZeroRedundancyOptimizer ...
//   scaler.update();
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace engine::nn {

class Steppable {
 public:
  virtual ~Steppable() = default;
  virtual void step() = 0;
  // The parameters whose gradients step() reads: the scaler divides these by the scale.
  virtual const std::vector<autograd::Variable>& params() const = 0;
  // Whether the step as a whole would meet an Inf or NaN, given whether this process found
  // one in params()' gradients. An optimizer that averages the gradients inside step()
  // (ZeRO's reduce-scatter design) asks every rank, since each holds only its own.
  virtual bool found_inf_in_step(bool found_here) { return found_here; }
};

}  // namespace engine::nn
