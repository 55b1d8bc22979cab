#include "nn/module.h"

#include <set>

namespace engine::nn {

Variable Module::register_parameter(const std::string& name, const Tensor& value) {
  Variable p(value, /*requires_grad=*/true);
  params_.emplace_back(name, p);
  return p;
}

void Module::register_buffer(const std::string& name, Tensor* buffer) {
  ENGINE_CHECK(buffer != nullptr && buffer->defined());
  buffers_.emplace_back(name, buffer);
}

void Module::collect(const std::string& prefix, std::vector<std::pair<std::string, Variable>>* params,
                     std::vector<std::pair<std::string, Tensor>>* buffers) const {
  if (params)
    for (const auto& [name, p] : params_) params->emplace_back(prefix + name, p);
  if (buffers)
    for (const auto& [name, b] : buffers_) buffers->emplace_back(prefix + name, *b);
  for (const auto& [name, child] : children_) child->collect(prefix + name + ".", params, buffers);
}

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> out;
  collect("", &out, nullptr);
  return out;
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> out;
  collect("", nullptr, &out);
  return out;
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> module) {
  for (auto& [n, child] : children_)
    if (n == name) {
      child = std::move(module);
      return;
    }
  throw Error("[set_child] no child named \"" + name + "\"");
}

void Module::train(bool on) {
  training_ = on;
  for (auto& [name, child] : children_) child->train(on);
}

void Module::to(Device device) {
  for (auto& [name, p] : params_) p.set_data(p.data().to(device));
  for (auto& [name, b] : buffers_) *b = b->to(device);
  for (auto& [name, child] : children_) child->to(device);
}

void Module::zero_grad() {
  for (Variable& p : parameters()) p.zero_grad();
}

StateDict Module::state_dict() const {
  StateDict out;
  for (auto& [name, p] : named_parameters()) out[name] = p.data();
  for (auto& [name, b] : named_buffers()) out[name] = b;
  return out;
}

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict mine = state_dict();
  // Check everything first, so a bad state dict changes nothing.
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      ENGINE_REQUIRE(!strict, "[load_state_dict] missing key \"", name, "\" (expected shape ", shape_str(t.shape()),
                     ")");
      continue;
    }
    ENGINE_REQUIRE(it->second.shape() == t.shape(), "[load_state_dict] shape mismatch for \"", name,
                   "\": checkpoint has ", shape_str(it->second.shape()), ", model has ", shape_str(t.shape()));
  }
  if (strict)
    for (const auto& [name, t] : state)
      ENGINE_REQUIRE(mine.count(name), "[load_state_dict] unexpected key \"", name, "\" (shape ", shape_str(t.shape()),
                     ") is not in the model");
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it != state.end()) Tensor(t).copy_(it->second);  // in place: views and handles stay valid
  }
}

}  // namespace engine::nn
