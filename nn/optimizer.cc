#include "nn/optimizer.h"

#include <cmath>

namespace engine::nn {

void check_parameters(const std::vector<autograd::Variable>& params, const char* name) {
  ENGINE_REQUIRE(!params.empty(), "[", name, "] got an empty parameter list (did the model register its layers?)");
  for (size_t i = 0; i < params.size(); ++i) {
    // A frozen parameter (requires_grad false, as in fine-tuning) is accepted, as PyTorch
    // does: it gets no gradient, so step() leaves it alone.
    ENGINE_REQUIRE(params[i].defined(), "[", name, "] parameter ", i, " is undefined");
    // Its gradient goes elsewhere (an FSDP unit's shard): stepping it would train nothing.
    ENGINE_REQUIRE(params[i].trained_through().empty(), "[", name, "] parameter ", i,
                   " is trained through another one: ", params[i].trained_through());
    // A computed tensor gets no .grad of its own to step with, and its update would not
    // reach the leaves it came from.
    ENGINE_REQUIRE(params[i].is_leaf(), "[", name, "] parameter ", i, " is not a leaf: it was computed by ",
                   params[i].grad_fn_name(), "; optimize the tensors it was computed from");
    ENGINE_REQUIRE(params[i].data().is_contiguous(), "[", name, "] parameter ", i, " is not contiguous");
    for (size_t j = 0; j < i; ++j)  // the same tensor twice would take two steps each time
      ENGINE_REQUIRE(params[i].data().storage() != params[j].data().storage() ||
                         params[i].data().offset() != params[j].data().offset(),
                     "[", name, "] parameter ", i, " is parameter ", j, " again: it would be updated twice a step");
  }
}

Optimizer::Optimizer(std::vector<autograd::Variable> params, const char* name)
    : params_(std::move(params)), name_(name) {
  check_parameters(params_, name_);
}

void Optimizer::require_in(const char* what, double value, double lo, double hi) const {
  ENGINE_REQUIRE(std::isfinite(value) && value >= lo && value <= hi, "[", name_, "] ", what, " must be in [", lo, ", ",
                 hi, "], got ", value);
}

void Optimizer::set_lr(double lr) {
  require_in("learning rate", lr, 0, 1e6);
  *hyperparameters().at("lr") = lr;
}

const Tensor* Optimizer::grad_to_step(size_t i) const {
  // Made over the model before FSDP or a ZeRO optimizer took it: that one trains the
  // parameter now, and this step would do nothing (FSDP sends the gradient to its shard)
  // or step it a second time with this rank's own gradient (ZeRO's reduce-scatter design).
  ENGINE_REQUIRE(params_[i].trained_through().empty(), "[", name_, ".step] parameter ", i,
                 " is trained through another one since this optimizer was made: ", params_[i].trained_through());
  const Tensor& grad = params_[i].grad();
  if (!grad.defined()) return nullptr;
  const Tensor& p = params_[i].data();
  ENGINE_REQUIRE(grad.shape() == p.shape() && grad.dtype() == p.dtype() && grad.device() == p.device(), "[", name_,
                 ".step] parameter ", i, " is ", shape_str(p.shape()), " ", dtype_name(p.dtype()), " on ",
                 p.device().str(), " but its grad() is ", shape_str(grad.shape()), " ", dtype_name(grad.dtype()),
                 " on ", grad.device().str(), ": a gradient must match its parameter");
  return &grad;
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

namespace {
// A state key "state.<index>.<name>" (a slot of state_slots()): its parameter's index, and its name.
size_t param_index(const std::string& key) { return std::stoul(key.substr(6, key.find('.', 6) - 6)); }
std::string slot_name(const std::string& key) { return key.substr(key.find('.', 6) + 1); }
// State tensors have their parameter's shape, except the scalar step counters ("state.3.step").
bool is_step_count(const std::string& key) { return slot_name(key) == "step"; }
}  // namespace

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
    const size_t index = param_index(key);
    const bool scalar = is_step_count(key);
    const Shape want = scalar ? Shape{} : params_[index].shape();
    ENGINE_REQUIRE(t.shape() == want, "[", name_, ".load_state_dict] shape mismatch for \"", key, "\": checkpoint has ",
                   shape_str(t.shape()), ", parameter has ", shape_str(want));
    if (scalar) {  // a step count: a whole number (a negative one would divide by 0 in Adam's bias correction)
      const double step = t.item();
      ENGINE_REQUIRE(std::isfinite(step) && step >= 0 && step <= 9007199254740992.0 && step == std::floor(step), "[",
                     name_, ".load_state_dict] \"", key, "\" must be a whole number of steps >= 0, got ", step);
    } else {
      check_state(slot_name(key), key, t.to(params_[index].data().dtype()));
    }
  }
  // A parameter's state is all there (it has stepped) or all absent: Adam with exp_avg and
  // no exp_avg_sq would have nothing to step with. Slots come sorted, a parameter's together.
  const std::string* seen = nullptr;  // a slot of the parameter before, in or out of the state
  for (auto& [key, slot] : slots_now) {
    if (seen && param_index(*seen) == param_index(key))
      ENGINE_REQUIRE(state.count(*seen) == state.count(key), "[", name_, ".load_state_dict] the state has \"",
                     state.count(key) ? key : *seen, "\" but not \"", state.count(key) ? *seen : key,
                     "\": a parameter's state is saved whole");
    seen = &key;
  }
  for (const auto& [key, value] : hyper)
    ENGINE_REQUIRE(state.count("param_groups.0." + key), "[", name_, ".load_state_dict] missing key \"param_groups.0.",
                   key, "\"");
  // Hyperparameters travel as float32 scalars. Keep our own double when it rounds to the
  // saved value, so a resumed run continues bit for bit; take the saved one otherwise. A
  // value out of range (a NaN learning rate in the file) puts every old one back.
  std::map<std::string, double> before;
  for (auto& [key, value] : hyper) {
    before[key] = *value;
    const double saved = state.at("param_groups.0." + key).item();
    if (float(*value) != float(saved)) *value = saved;
  }
  try {
    check_options();
  } catch (const Error&) {
    for (auto& [key, value] : hyper) *value = before[key];
    throw;
  }
  // Taken as the parameter's dtype and device (as PyTorch does; a checkpoint is read onto
  // the CPU), and step counts as int64; absent: that parameter has not stepped yet.
  for (auto& [key, slot] : slots_now) {
    auto it = state.find(key);
    if (it == state.end()) {
      *slot = Tensor();
      continue;
    }
    const Tensor& p = params_[param_index(key)].data();
    const Tensor& t = it->second;
    *slot = is_step_count(key) ? t.to(DType::Int64).to(Device::cpu()) : t.to(p.dtype()).to(p.device());
    if (slot->storage() == t.storage()) *slot = t.clone();  // to() may return the tensor itself
  }
}

}  // namespace engine::nn
