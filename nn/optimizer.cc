#include "nn/optimizer.h"

namespace engine::nn {

Optimizer::Optimizer(std::vector<autograd::Variable> params, const char* name)
    : params_(std::move(params)), name_(name) {
  for (size_t i = 0; i < params_.size(); ++i) {
    ENGINE_REQUIRE(params_[i].defined() && params_[i].requires_grad(), "[", name_, "] parameter ", i,
                   " does not require grad");
    ENGINE_REQUIRE(params_[i].data().is_contiguous(), "[", name_, "] parameter ", i, " is not contiguous");
  }
}

void Optimizer::zero_grad() {
  for (auto& p : params_) p.zero_grad();
}

StateDict Optimizer::state_dict() const {
  StateDict out;
  for (auto& [key, slot] : slots())
    if (slot->defined()) out[key] = slot->clone();
  for (auto& [key, value] : const_cast<Optimizer*>(this)->hyperparameters())
    out["param_groups.0." + key] = scalar_tensor(*value);
  return out;
}

void Optimizer::load_state_dict(const StateDict& state) {
  auto slots_now = state_slots();
  auto hyper = hyperparameters();
  // Validate everything before touching anything.
  for (const auto& [key, t] : state) {
    if (key.rfind("param_groups.0.", 0) == 0) {
      ENGINE_REQUIRE(hyper.count(key.substr(15)) && t.numel() == 1, "[", name_, ".load_state_dict] unexpected key \"",
                     key, "\"");
      continue;
    }
    auto it = slots_now.find(key);
    ENGINE_REQUIRE(it != slots_now.end(), "[", name_, ".load_state_dict] unexpected key \"", key,
                   "\" (this optimizer has ", params_.size(), " parameters)");
    // State tensors have the parameter's shape, except scalar step counters.
    const size_t index = std::stoul(key.substr(6, key.find('.', 6) - 6));
    const bool scalar = key.size() >= 5 && key.compare(key.size() - 5, 5, ".step") == 0;
    const Shape want = scalar ? Shape{} : params_[index].shape();
    ENGINE_REQUIRE(t.shape() == want, "[", name_, ".load_state_dict] shape mismatch for \"", key, "\": checkpoint has ",
                   shape_str(t.shape()), ", parameter has ", shape_str(want));
  }
  for (const auto& [key, value] : hyper)
    ENGINE_REQUIRE(state.count("param_groups.0." + key), "[", name_, ".load_state_dict] missing key \"param_groups.0.",
                   key, "\"");
  for (auto& [key, slot] : slots_now) {
    auto it = state.find(key);
    *slot = it == state.end() ? Tensor() : it->second.clone();  // absent: that parameter has not stepped yet
  }
  // Hyperparameters travel as float32 scalars. Keep our own double when it rounds to the
  // saved value, so a resumed run continues bit for bit; take the saved one otherwise.
  for (auto& [key, value] : hyper) {
    const double saved = state.at("param_groups.0." + key).item();
    if (float(*value) != float(saved)) *value = saved;
  }
}

}  // namespace engine::nn
