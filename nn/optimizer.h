// Optimizer: what SGD and Adam share. It holds the parameters (in the order given, usually
// model.parameters()), clears their gradients, and saves its per-parameter state.
//
//   Adam opt(model.parameters(), {.lr = 1e-3});
//   opt.zero_grad(); loss.backward(); opt.step();
//   StateDict s = opt.state_dict();   // "state.0.exp_avg", ..., "param_groups.0.lr", ...
//   opt.load_state_dict(s);           // checks every key and shape first
#pragma once

#include <map>
#include <string>
#include <vector>

#include "autograd/variable.h"
#include "nn/module.h"
#include "nn/steppable.h"

namespace engine::nn {

// Throws naming the first parameter no optimizer can step: none at all, an undefined one,
// one trained through something else (an FSDP unit), a computed (non-leaf) tensor, a
// non-contiguous one, or the same tensor twice. Every optimizer checks its list with it.
void check_parameters(const std::vector<autograd::Variable>& params, const char* name);

class Optimizer : public Steppable {
 public:
  explicit Optimizer(std::vector<autograd::Variable> params, const char* name);
  void zero_grad();
  const std::vector<autograd::Variable>& params() const override { return params_; }
  // The learning rate, for schedules that change it between steps.
  double lr() { return *hyperparameters().at("lr"); }
  void set_lr(double lr);  // finite and >= 0, or an error (a schedule's NaN stops here)

  // Per-parameter state as "state.<i>.<name>", hyperparameters as "param_groups.0.<name>"
  // (float32 scalars), PyTorch's layout flattened into named tensors.
  StateDict state_dict() const;
  // Restores what state_dict() saved. Throws naming the key if one is missing, unexpected
  // or of the wrong shape, and then changes nothing.
  void load_state_dict(const StateDict& state);

 protected:
  // Subclasses list their state tensors (by parameter index and name) and hyperparameters.
  virtual std::map<std::string, Tensor*> state_slots() = 0;
  virtual std::map<std::string, double*> hyperparameters() = 0;
  // Throws naming the first hyperparameter out of its range. Called by the subclass's
  // constructor, and by load_state_dict on the values a checkpoint brings.
  virtual void check_options() const = 0;
  // For check_options: `value` must be finite and in [lo, hi].
  void require_in(const char* what, double value, double lo, double hi) const;
  // Called by load_state_dict for each state tensor a checkpoint brings ("exp_avg_sq", ...,
  // already of the parameter's dtype): throws naming `key` when its values are ones this
  // optimizer could not have written. Accepts anything by default.
  virtual void check_state(const std::string& /*name*/, const std::string& /*key*/, const Tensor& /*value*/) const {}
  // The gradient step() uses for parameter i, or null when it has none this step. Throws
  // naming the parameter when the gradient does not match it (shape, dtype or device): one
  // assigned through mutable_grad() would otherwise be broadcast into the update; and when
  // FSDP or a ZeRO optimizer has taken the parameter since this optimizer was made.
  const Tensor* grad_to_step(size_t i) const;
  std::map<std::string, Tensor*> slots() const { return const_cast<Optimizer*>(this)->state_slots(); }

  std::vector<autograd::Variable> params_;
  const char* name_;
};

}  // namespace engine::nn
