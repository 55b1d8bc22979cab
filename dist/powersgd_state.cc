// PowerSGDState's checkpoint: its state as named tensors, and back.
#include <cmath>
#include <string>

#include "dist/powersgd.h"
#include "tensor/generator_state.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace engine::dist {
namespace {

// The settings that shape the state (which matrices are compressed, the shape of each Q,
// whether residuals and Qs are kept) or its schedule. The seed is not among them: the
// generator's state is saved itself. Each is kept as a float32 scalar, so each is
// compared as float32 rounds it.
std::map<std::string, double> settings(const PowerSGDState& s) {
  return {{"matrix_approximation_rank", float(s.matrix_approximation_rank)},
          {"start_powerSGD_iter", float(s.start_powerSGD_iter)},
          {"min_compression_rate", float(s.min_compression_rate)},
          {"use_error_feedback", s.use_error_feedback},
          {"warm_start", s.warm_start},
          {"orthogonalization_epsilon", float(s.orthogonalization_epsilon)}};
}

int64_t count(const nn::StateDict& state, const std::string& key) {
  ENGINE_REQUIRE(state.count(key), "[PowerSGD] the state has no \"", key, "\"");
  const Tensor& t = state.at(key);
  ENGINE_REQUIRE(t.dtype() == DType::Int64 && t.numel() == 1 && t.item() >= 0, "[PowerSGD] \"", key,
                 "\" must be one int64 >= 0");
  return int64_t(t.item());
}

// A residual or a Q: float32 of the expected rank, every value finite (a NaN kept there
// would make every later step NaN).
Tensor checked_values(const std::string& key, const Tensor& t, int64_t dims) {
  ENGINE_REQUIRE(t.dtype() == DType::Float32 && t.dim() == dims, "[PowerSGD] \"", key, "\" must be a ", dims,
                 "-d float32 tensor, got ", shape_str(t.shape()), " ", dtype_name(t.dtype()));
  ENGINE_REQUIRE(all_finite(t), "[PowerSGD] \"", key, "\" holds inf or NaN: no step keeps those");
  return t.contiguous().clone();
}

}  // namespace

nn::StateDict PowerSGDState::state_dict() const {
  nn::StateDict out;
  const auto int64 = [](int64_t v) { return full({}, double(v), DType::Int64); };
  out["iter"] = int64(iter);
  out["numel_before_compression"] = int64(numel_before_compression);
  out["numel_after_compression"] = int64(numel_after_compression);
  for (const auto& [name, value] : settings(*this)) out["settings." + name] = full({}, value);
  for (const auto& [bucket, residual] : error) out["error." + std::to_string(bucket)] = residual.clone();
  for (const auto& [bucket, q] : qs)
    for (size_t k = 0; k < q.size(); ++k) out["q." + std::to_string(bucket) + "." + std::to_string(k)] = q[k].clone();
  out["rng"] = generator_state(rng);
  if (rank >= 0) {  // set once a bucket has been through the hook
    out["rank"] = int64(rank);
    out["world_size"] = int64(world_size);
  }
  return out;
}

void PowerSGDState::load_state_dict(const nn::StateDict& state) {
  for (const auto& [name, value] : settings(*this)) {
    const std::string key = "settings." + name;
    ENGINE_REQUIRE(state.count(key) && state.at(key).numel() == 1, "[PowerSGD] the state has no \"", key, "\"");
    const double saved = state.at(key).item();
    ENGINE_REQUIRE(saved == value, "[PowerSGD] the state was saved with ", name, " = ", saved, ", this one has ", value,
                   ": resume with the settings it was saved with");
  }
  const int64_t new_iter = count(state, "iter"), before = count(state, "numel_before_compression"),
                after = count(state, "numel_after_compression");
  const bool placed = state.count("rank") || state.count("world_size");
  const int64_t new_rank = placed ? count(state, "rank") : -1, new_world = placed ? count(state, "world_size") : 0;
  ENGINE_REQUIRE(!placed || new_rank < new_world, "[PowerSGD] \"rank\" ", new_rank, " is not below \"world_size\" ",
                 new_world);
  ENGINE_REQUIRE(state.count("rng"), "[PowerSGD] the state has no \"rng\"");
  const Generator::State new_rng = parse_generator_state(state.at("rng"), "[PowerSGD] \"rng\"");
  std::map<int, Tensor> new_error;
  std::map<int, std::map<int64_t, Tensor>> new_qs;  // bucket -> k -> Q
  for (const auto& [key, t] : state) {
    const size_t dot = key.find('.');
    const std::string kind = key.substr(0, dot);
    if (kind == "settings" || kind == "iter" || kind == "rng" || kind == "numel_before_compression" ||
        kind == "numel_after_compression" || kind == "rank" || kind == "world_size")
      continue;
    ENGINE_REQUIRE((kind == "error" || kind == "q") && dot != std::string::npos, "[PowerSGD] unexpected key \"", key,
                   "\" (a PowerSGD state holds iter, numel_*, settings.*, error.<bucket>, q.<bucket>.<k>, rng, rank, "
                   "world_size)");
    const std::string rest = key.substr(dot + 1);
    if (kind == "error") {
      const int b = int(parse_int(rest, "[PowerSGD] the bucket of \"" + key + "\"", 0, 1 << 20));
      new_error[b] = checked_values(key, t, 1);
      continue;
    }
    const size_t dot2 = rest.find('.');
    ENGINE_REQUIRE(dot2 != std::string::npos, "[PowerSGD] key \"", key, "\" is not q.<bucket>.<k>");
    const int b = int(parse_int(rest.substr(0, dot2), "[PowerSGD] the bucket of \"" + key + "\"", 0, 1 << 20));
    const int64_t k = parse_int(rest.substr(dot2 + 1), "[PowerSGD] the matrix of \"" + key + "\"", 0, 1 << 20);
    new_qs[b][k] = checked_values(key, t, 2);
  }
  std::map<int, std::vector<Tensor>> kept;
  for (auto& [b, by_k] : new_qs) {
    std::vector<Tensor>& q = kept[b];
    for (auto& [k, t] : by_k) {  // in order of k: q.<b>.0, q.<b>.1, ... with none missing
      ENGINE_REQUIRE(k == int64_t(q.size()), "[PowerSGD] the state has no \"q.", b, ".", q.size(), "\" but has \"q.", b,
                     ".", k, "\"");
      q.push_back(t);
    }
  }
  iter = new_iter;
  numel_before_compression = before;
  numel_after_compression = after;
  error = std::move(new_error);
  qs = std::move(kept);
  rng.set_state(new_rng);
  rank = int(new_rank);
  world_size = int(new_world);
}

}  // namespace engine::dist
