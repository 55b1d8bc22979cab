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

namespace {
// A module used twice (a tied layer: the same child in two places) reaches its parameters
// by two names. As PyTorch's named_parameters(), keep each one once, under its first name,
// so that an optimizer or DDP steps and reduces it once; state_dict keeps every name.
template <class T, class Key>
std::vector<std::pair<std::string, T>> first_names(std::vector<std::pair<std::string, T>> all, Key key) {
  std::vector<std::pair<std::string, T>> out;
  std::set<std::pair<const void*, int64_t>> seen;
  for (auto& entry : all)
    if (seen.insert(key(entry.second)).second) out.push_back(std::move(entry));
  return out;
}
}  // namespace

std::vector<std::pair<std::string, Variable>> Module::named_parameters() const {
  std::vector<std::pair<std::string, Variable>> all;
  collect("", &all, nullptr);
  return first_names(std::move(all),
                     [](const Variable& p) { return std::pair<const void*, int64_t>(p.impl().get(), 0); });
}

std::vector<Variable> Module::parameters() const {
  std::vector<Variable> out;
  for (auto& [name, p] : named_parameters()) out.push_back(p);
  return out;
}

std::vector<std::pair<std::string, Tensor>> Module::named_buffers() const {
  std::vector<std::pair<std::string, Tensor>> all;
  collect("", nullptr, &all);
  // A buffer is one tensor's storage and offset; the same module twice gives the same ones.
  return first_names(std::move(all),
                     [](const Tensor& b) { return std::pair<const void*, int64_t>(b.storage().get(), b.offset()); });
}

bool Module::reaches(const Module* other) const {
  if (this == other) return true;
  for (const auto& [name, child] : children_)
    if (child->reaches(other)) return true;
  return false;
}

void Module::set_child(const std::string& name, std::shared_ptr<Module> module) {
  ENGINE_REQUIRE(module != nullptr, "[set_child] the module given for \"", name, "\" is null");
  // A module inside itself would make parameters(), train() and forward() recurse forever.
  ENGINE_REQUIRE(!module->reaches(this), "[set_child] the module given for \"", name,
                 "\" contains this module (or is it): a model cannot be inside itself");
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
  std::vector<std::pair<std::string, Variable>> params;
  std::vector<std::pair<std::string, Tensor>> buffers;
  collect("", &params, &buffers);  // every name, a tied layer's under each of its names (as PyTorch)
  for (auto& [name, p] : params) out[name] = p.data();
  for (auto& [name, b] : buffers) out[name] = b;
  return out;
}

void Module::check_state_tree(const std::string& prefix, const StateDict& state) const {
  check_state(prefix, state);
  for (const auto& [name, child] : children_) child->check_state_tree(prefix + name + ".", state);
}

namespace {
// Whether every key of `keys` starts with `prefix`.
bool all_start_with(const StateDict& keys, const std::string& prefix) {
  for (const auto& [key, t] : keys)
    if (key.compare(0, prefix.size(), prefix) != 0) return false;
  return true;
}

// When the model's key `name` is missing from `state` because every key of one carries a
// prefix the other lacks ("module.0.weight", from a DistributedDataParallel's, ours or PyTorch's
// state_dict(), against "0.weight"), say so: otherwise the error names only the first
// missing key.
std::string prefix_hint(const std::string& name, const StateDict& state, const StateDict& mine) {
  for (const auto& [key, t] : state) {
    const bool longer = key.size() > name.size() && key.compare(key.size() - name.size(), name.size(), name) == 0;
    const bool shorter = name.size() > key.size() && name.compare(name.size() - key.size(), key.size(), key) == 0;
    if (longer) {
      const std::string prefix = key.substr(0, key.size() - name.size());
      if (prefix.back() == '.' && all_start_with(state, prefix))
        return "; every key of the state starts with \"" + prefix + "\" (\"" + key + "\")" +
               (prefix == "module." ? ", as a DistributedDataParallel's state_dict() names them (here and in PyTorch)"
                                    : "") +
               ": remove that prefix from the keys, or save the wrapped model's state_dict()" +
               (prefix == "module." ? " (ddp.module())" : "");
    }
    if (shorter) {
      const std::string prefix = name.substr(0, name.size() - key.size());
      if (prefix.back() == '.' && all_start_with(mine, prefix))
        return "; the state has \"" + key + "\": it was saved from a model without the prefix \"" + prefix +
               "\" that every key of this one has" +
               (prefix == "module." ? ": load it into the wrapped model (ddp.module())" : "");
    }
  }
  return "";
}
}  // namespace

void Module::load_state_dict(const StateDict& state, bool strict) {
  const StateDict mine = state_dict();
  // Check everything first, so a bad state dict changes nothing.
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it == state.end()) {
      ENGINE_REQUIRE(!strict, "[load_state_dict] missing key \"", name, "\" (expected shape ", shape_str(t.shape()),
                     ")", prefix_hint(name, state, mine));
      continue;
    }
    ENGINE_REQUIRE(it->second.shape() == t.shape(), "[load_state_dict] shape mismatch for \"", name,
                   "\": checkpoint has ", shape_str(it->second.shape()), ", model has ", shape_str(t.shape()));
  }
  if (strict)
    for (const auto& [name, t] : state)
      ENGINE_REQUIRE(mine.count(name), "[load_state_dict] unexpected key \"", name, "\" (shape ", shape_str(t.shape()),
                     ") is not in the model");
  check_state_tree("", state);
  for (const auto& [name, t] : mine) {
    auto it = state.find(name);
    if (it != state.end()) Tensor(t).copy_(it->second);  // in place: views and handles stay valid
  }
}

}  // namespace engine::nn
