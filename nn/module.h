// Module: the base of every layer and model. It owns named parameters (Variables that
// require grad), buffers (Tensors that are state but not trained, like running means) and
// child modules, and finds them all recursively with PyTorch's dotted names.
//
//   auto model = std::make_shared<Sequential>(std::vector<ModulePtr>{
//       std::make_shared<Linear>(784, 256), std::make_shared<ReLU>(), std::make_shared<Linear>(256, 10)});
//   Variable logits = (*model)(x);
//   for (auto& [name, p] : model->named_parameters()) ...   // "0.weight", "0.bias", "2.weight", ...
//   StateDict sd = model->state_dict();                     // name -> Tensor (shares storage)
//   model->load_state_dict(sd);                             // copies values in; checks keys and shapes
//
// A subclass registers what it owns in its constructor and implements forward().
#pragma once

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "autograd/ops.h"

namespace engine::nn {

using autograd::Variable;
using StateDict = std::map<std::string, Tensor>;

class Module {
 public:
  Module() = default;
  Module(const Module&) = delete;  // buffers are registered by address
  Module& operator=(const Module&) = delete;
  virtual ~Module() = default;
  virtual Variable forward(const Variable& x) = 0;
  Variable operator()(const Variable& x) { return forward(x); }

  // All parameters of this module and its children, depth first, in registration order,
  // each once: a module used in two places (tied weights) gives its parameters under the
  // first name only, as PyTorch's. state_dict() lists them under every name.
  std::vector<Variable> parameters() const;
  std::vector<std::pair<std::string, Variable>> named_parameters() const;
  std::vector<std::pair<std::string, Tensor>> named_buffers() const;
  const std::vector<std::pair<std::string, std::shared_ptr<Module>>>& children() const { return children_; }
  // Replaces the child registered as `name` (used by convert_sync_batchnorm). Containers
  // that run their children through children(), like Sequential, use the new one at once;
  // a module that also keeps its own pointer to the old child must update that itself.
  void set_child(const std::string& name, std::shared_ptr<Module> module);

  // Training mode (the default) vs evaluation mode, for this module and all children.
  void train(bool on = true);
  void eval() { train(false); }
  bool is_training() const { return training_; }

  // Drops every parameter's gradient.
  void zero_grad();

  // Moves every parameter and buffer to `device` (a no-op for those already there).
  // Parameter handles stay valid: the Variables get new data, not new identities.
  void to(Device device);

  // Parameters and buffers by dotted name. The tensors share storage with the module.
  StateDict state_dict() const;
  // Copies values in. With strict, a missing or unexpected key is an error naming it; a
  // shape mismatch is always an error naming the key and both shapes. Nothing is changed
  // unless every check passes.
  void load_state_dict(const StateDict& state, bool strict = true);

 protected:
  // Registers a parameter (made to require grad) and returns the handle to keep.
  Variable register_parameter(const std::string& name, const Tensor& value);
  // Registers a buffer held in a member of the subclass, which is read through the pointer
  // (so to() can replace it). The member must live as long as the module.
  void register_buffer(const std::string& name, Tensor* buffer);
  // Called by load_state_dict before it copies anything: throws naming the key when the
  // entry `prefix + name` of `state` holds a value this module could not have saved (a
  // negative running variance). Accepts anything by default.
  virtual void check_state(const std::string& /*prefix*/, const StateDict& /*state*/) const {}
  template <class M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> module) {
    children_.emplace_back(name, module);
    return module;
  }

 private:
  void check_state_tree(const std::string& prefix, const StateDict& state) const;
  bool reaches(const Module* other) const;  // other is this module or one of its descendants
  void collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>* params,
               std::vector<std::pair<std::string, Tensor>>* buffers) const;

  std::vector<std::pair<std::string, Variable>> params_;
  std::vector<std::pair<std::string, Tensor*>> buffers_;
  std::vector<std::pair<std::string, std::shared_ptr<Module>>> children_;
  bool training_ = true;
};

using ModulePtr = std::shared_ptr<Module>;

}  // namespace engine::nn
