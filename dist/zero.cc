#include "dist/zero.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <utility>

#include "dist/broadcast_state.h"
#include "dist/dist.h"
#include "dist/grad_norm.h"
#include "dist/same_model.h"
#include "nn/clip_grad.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace engine::dist {

ZeroRedundancyOptimizer::ZeroRedundancyOptimizer(std::vector<nn::Variable> params, ZeroOptimizer kind,
                                                 ZeroOptions options)
    : params_(std::move(params)), kind_(kind), options_(options) {
  group_ = options_.group ? options_.group : &default_group();
  nn::check_parameters(params_, "ZeroRedundancyOptimizer");
  check_same_parameters(*group_, params_, {}, "[ZeroRedundancyOptimizer]");
  for (auto& p : params_) total_ += p.numel();
  const int n = group_->size();
  shard_ = (total_ + n - 1) / n;  // the last shard is padded with zeros
  // This rank's shard of the parameters, as one flat Variable the inner optimizer updates.
  Tensor flat = zeros({shard_ * n});
  int64_t off = 0;
  for (auto& p : params_) {
    flat.narrow(0, off, p.numel()).copy_(p.data().reshape({-1}));
    off += p.numel();
  }
  shard_param_ = nn::Variable(flat.narrow(0, int64_t(group_->rank()) * shard_, shard_).clone(), true);
  if (kind_ == ZeroOptimizer::SGD)
    inner_ = std::make_unique<nn::SGD>(std::vector<nn::Variable>{shard_param_}, options_.sgd);
  else
    inner_ = std::make_unique<nn::Adam>(std::vector<nn::Variable>{shard_param_}, options_.adam);
  // In the reduce-scatter design .grad is this rank's own gradient until step() averages
  // it: clipping it (nn::clip_grad_norm_) or stepping it with another optimizer would act
  // on the wrong gradient, so both are refused, naming what to do instead.
  if (!options_.ddp_averages_gradients)
    mark_parameters(
        "it is in a ZeroRedundancyOptimizer that averages the gradients in its step() (the reduce-scatter "
        "design), so its grad() holds this rank's own gradient, not the average: clip with "
        "opt.clip_grad_norm_(max_norm), and step it only through that optimizer");
}

ZeroRedundancyOptimizer::~ZeroRedundancyOptimizer() {
  if (marked_) mark_parameters("");
}

void ZeroRedundancyOptimizer::mark_parameters(const std::string& why) {
  for (auto& p : params_) p.set_trained_through(why);
  marked_ = !why.empty();
}

void ZeroRedundancyOptimizer::join_begins() {
  if (options_.ddp_averages_gradients)
    mark_parameters(
        "it is in a ZeroRedundancyOptimizer given to a Join: a rank whose data has run out repeats the others' "
        "step() without running the training loop, and would step its shard with the gradient unclipped: clip "
        "with opt.clip_grad_norm_(max_norm), which it repeats, and step it only through that optimizer");
}

void ZeroRedundancyOptimizer::join_ends() {
  if (options_.ddp_averages_gradients) mark_parameters("");
}

Tensor ZeroRedundancyOptimizer::flatten_grads() const {
  Tensor flat = zeros({shard_ * group_->size()});
  int64_t off = 0;
  for (auto& p : params_) {
    if (p.grad().defined()) flat.narrow(0, off, p.numel()).copy_(p.grad().reshape({-1}));
    off += p.numel();
  }
  return flat;
}

// Rank r's shard of the averaged gradient: reduce-scattered here, or, when DDP has
// all-reduced the gradients in backward, cut out of the local (already averaged) one.
Tensor ZeroRedundancyOptimizer::averaged_grad_shard() const {
  Tensor grad_shard = zeros({shard_});
  if (options_.ddp_averages_gradients)
    grad_shard.copy_(flatten_grads().narrow(0, int64_t(group_->rank()) * shard_, shard_));
  else
    group_->reduce_scatter(grad_shard, flatten_grads(), ReduceOp::Avg).wait();
  return grad_shard;
}

double ZeroRedundancyOptimizer::clip_grad_norm_(double max_norm, double norm_type, bool error_if_nonfinite) {
  ENGINE_REQUIRE(max_norm >= 0, "[ZeroRedundancyOptimizer::clip_grad_norm_] max_norm must be >= 0, got ", max_norm);
  join_settings(Clip{max_norm, norm_type, error_if_nonfinite});
  // With DDP every rank holds the whole averaged gradient: clip it as one process would,
  // through handles that share the gradients (under a Join the parameters themselves
  // refuse nn's clipping, which only this call may do).
  if (options_.ddp_averages_gradients) {
    std::vector<nn::Variable> grads;
    for (const auto& p : params_) {
      nn::Variable handle(p.data());
      handle.set_grad(p.grad());
      grads.push_back(handle);
    }
    return nn::clip_grad_norm_(grads, max_norm, norm_type, error_if_nonfinite);
  }
  if (!clipped_shard_.defined()) clipped_shard_ = averaged_grad_shard();
  nn::Variable shard = shard_param_;
  shard.set_grad(clipped_shard_);  // shares its memory: scaling it scales clipped_shard_
  // Each rank's part of the norm over its shard, combined over the ranks. The padding's
  // gradient is 0: it adds nothing.
  const double total = total_grad_norm(*group_, nn::grad_norm_part({shard}, norm_type), norm_type);
  nn::scale_grads_to_norm_({shard}, max_norm, total, norm_type, error_if_nonfinite);
  return total;
}

bool ZeroRedundancyOptimizer::found_inf_in_step(bool found_here) {
  scaled_ = true;
  if (options_.ddp_averages_gradients) return found_here;
  Tensor any = from_vector(std::vector<float>{found_here ? 1.0f : 0.0f});
  group_->all_reduce(any, ReduceOp::Max).wait();
  return any.item() > 0;
}

void ZeroRedundancyOptimizer::join_shadow_step() {
  ENGINE_REQUIRE(!scaled_,
                 "[ZeroRedundancyOptimizer] this rank's data ran out under a Join, but the others step through a "
                 "GradScaler: the gradient a finished rank receives is still multiplied by a scale it does not "
                 "know, and it cannot tell which steps the others skip. Give every rank the same number of "
                 "batches when training in float16 with a sharded optimizer");
  if (const std::optional<Clip> clip = join_settings(std::nullopt))
    clip_grad_norm_(clip->max_norm, clip->norm_type, clip->error_if_nonfinite);
  step();
}

void ZeroRedundancyOptimizer::join_step_begins(int training, int highest_training) {
  join_root_ = training < group_->size() ? highest_training : -1;
}

// Once per step while a rank has finished under a Join: the highest training rank's
// learning rate and clip, broadcast exactly, so that a finished rank's shadow
// step updates its shard as the others would. Returns the root's clip (the finished rank
// repeats it); a no-op outside a Join or once this step has had it.
std::optional<ZeroRedundancyOptimizer::Clip> ZeroRedundancyOptimizer::join_settings(std::optional<Clip> mine) {
  if (join_root_ < 0) return std::nullopt;
  const int root = std::exchange(join_root_, -1);
  const std::vector<double> v =
      broadcast_doubles(*group_,
                        {lr(), mine ? 1.0 : 0.0, mine ? mine->max_norm : 0, mine ? mine->norm_type : 0,
                         mine && mine->error_if_nonfinite ? 1.0 : 0.0},
                        root);
  if (group_->rank() != root) set_lr(v[0]);
  if (v[1] == 0) return std::nullopt;
  return Clip{v[2], v[3], v[4] != 0};
}

void ZeroRedundancyOptimizer::step() {
  join_settings(std::nullopt);  // under a Join with a rank finished, unless clip_grad_norm_ had them
  // 1. The averaged gradient's shard, unless clip_grad_norm_ has reduced (and clipped) it.
  Tensor grad_shard = clipped_shard_.defined() ? std::exchange(clipped_shard_, Tensor()) : averaged_grad_shard();
  // 2. Update this rank's shard; only here does optimizer state exist.
  shard_param_.set_grad(grad_shard);
  inner_->step();
  restore_frozen();
  // 3. All-gather the updated shards into every rank's parameters.
  std::vector<Tensor> shards;
  group_->all_gather(&shards, shard_param_.data()).wait();
  int64_t off = 0;
  for (auto& p : params_) {
    // Copy parameter p's elements [off, off + numel) out of the gathered shards.
    int64_t done = 0;
    Tensor dst = p.data().reshape({-1});
    while (done < p.numel()) {
      const int64_t at = off + done, r = at / shard_, in = at % shard_;
      const int64_t len = std::min(p.numel() - done, shard_ - in);
      dst.narrow(0, done, len).copy_(shards[size_t(r)].narrow(0, in, len));
      done += len;
    }
    off += p.numel();
  }
}

// A frozen parameter (requires_grad false, as torch.optim leaves alone) gets a zero gradient
// in the flat shard, but the inner optimizer steps the whole shard: weight decay or earlier
// momentum would still move it. Its elements in this rank's shard are put back first.
void ZeroRedundancyOptimizer::restore_frozen() {
  const int64_t lo = int64_t(group_->rank()) * shard_, hi = lo + shard_;
  int64_t off = 0;
  for (auto& p : params_) {
    const int64_t a = std::max(off, lo), b = std::min(off + p.numel(), hi);
    if (!p.requires_grad() && a < b)
      shard_param_.data().narrow(0, a - lo, b - a).copy_(p.data().reshape({-1}).narrow(0, a - off, b - a));
    off += p.numel();
  }
}

void ZeroRedundancyOptimizer::zero_grad() {
  clipped_shard_ = Tensor();  // a clipped gradient not stepped is dropped with the rest
  for (auto& p : params_) p.zero_grad();
}

size_t ZeroRedundancyOptimizer::state_bytes() const {
  size_t bytes = 0;
  for (auto& [key, t] : inner_->state_dict())
    if (key.rfind("state.", 0) == 0) bytes += size_t(t.numel()) * dtype_size(t.dtype());
  return bytes;
}

nn::StateDict ZeroRedundancyOptimizer::consolidate_state_dict(int to) {
  ENGINE_REQUIRE(to >= 0 && to < group_->size(), "[ZeroRedundancyOptimizer] consolidate_state_dict(to = ", to,
                 "): there is no such rank in a group of ", group_->size(), " (no rank would get the state)");
  const nn::StateDict mine = inner_->state_dict();
  nn::StateDict full;
  for (const auto& [key, t] : mine) {
    if (key.rfind("param_groups.", 0) == 0) {
      if (group_->rank() == to) full[key] = t;
      continue;
    }
    const std::string name = key.substr(key.rfind('.') + 1);  // "momentum_buffer", "exp_avg", "step"
    std::vector<Tensor> all;
    group_->all_gather(&all, t).wait();
    if (group_->rank() != to) continue;
    if (t.dim() == 0) {  // a step counter: the same on every shard, one per parameter
      for (size_t i = 0; i < params_.size(); ++i) full["state." + std::to_string(i) + "." + name] = all[0].clone();
      continue;
    }
    Tensor flat = empty({shard_ * group_->size()});
    for (int r = 0; r < group_->size(); ++r) flat.narrow(0, int64_t(r) * shard_, shard_).copy_(all[size_t(r)]);
    int64_t off = 0;
    for (size_t i = 0; i < params_.size(); ++i) {
      full["state." + std::to_string(i) + "." + name] =
          flat.narrow(0, off, params_[i].numel()).reshape(params_[i].shape()).clone();
      off += params_[i].numel();
    }
  }
  return full;
}

namespace {

// "state.<i>.<name>" split into i and name; any other key is named.
std::pair<size_t, std::string> state_key(const std::string& key, size_t params) {
  const size_t dot = key.rfind("state.", 0) == 0 ? key.find('.', 6) : std::string::npos;
  ENGINE_REQUIRE(dot != std::string::npos && dot + 1 < key.size(), "[ZeroRedundancyOptimizer] key \"", key,
                 "\" is neither param_groups.<...> nor state.<parameter>.<name>");
  const int64_t i = parse_int(key.substr(6, dot - 6), "[ZeroRedundancyOptimizer] the parameter of key \"" + key + "\"",
                              0, int64_t(params) - 1);
  return {size_t(i), key.substr(dot + 1)};
}

// A full state is all or nothing per parameter: a parameter with some state has every kind
// another one has (else its missing elements would start from zero, silently); and the
// step counts agree, since the shard keeps one for all of them.
void check_full_state(const nn::StateDict& full, size_t params) {
  std::map<std::string, std::vector<size_t>> holders;             // state name -> parameters that have it
  std::map<size_t, std::string> some_state;                       // parameter -> one of its keys
  std::map<std::string, std::pair<std::string, double>> counter;  // 0-d name -> first key, value
  bool groups = false;
  for (const auto& [key, t] : full) {
    if (key.rfind("param_groups.", 0) == 0) {
      groups = true;
      continue;
    }
    const auto [i, name] = state_key(key, params);
    some_state.emplace(i, key);
    if (t.dim() > 0) {
      holders[name].push_back(i);
      continue;
    }
    const double v = t.item();
    auto [first, inserted] = counter.emplace(name, std::make_pair(key, v));
    ENGINE_REQUIRE(inserted || first->second.second == v, "[ZeroRedundancyOptimizer] the state's \"", name,
                   "\" differs between parameters (\"", first->second.first, "\" is ", first->second.second, ", \"",
                   key, "\" is ", v, "): a sharded optimizer keeps one for its whole shard, so it cannot resume them");
  }
  ENGINE_REQUIRE(groups, "[ZeroRedundancyOptimizer] the state has no param_groups entries (", full.size(),
                 " keys): consolidate_state_dict(to) returns the full state on rank `to` only, an empty one elsewhere. "
                 "Every rank loads the full state (the file rank `to` saved)");
  for (const auto& [name, who] : holders)
    for (const auto& [i, key] : some_state)
      ENGINE_REQUIRE(std::find(who.begin(), who.end(), i) != who.end(), "[ZeroRedundancyOptimizer] the state has \"",
                     key, "\" but not \"state.", i, ".", name, "\", which parameter ", who[0],
                     " has: a partial state would start those elements from zero");
}

}  // namespace

void ZeroRedundancyOptimizer::load_state_dict(const nn::StateDict& full) {
  check_full_state(full, params_.size());
  nn::StateDict shard;
  std::map<std::string, Tensor> flat;  // state name -> flattened over all parameters
  for (const auto& [key, t] : full) {
    if (key.rfind("param_groups.", 0) == 0) {
      shard[key] = t;
      continue;
    }
    const auto [i, name] = state_key(key, params_.size());
    if (t.dim() == 0) {
      shard["state.0." + name] = t;
      continue;
    }
    ENGINE_REQUIRE(t.shape() == params_[i].shape(), "[ZeroRedundancyOptimizer] state \"", key, "\" has shape ",
                   shape_str(t.shape()), ", parameter has ", shape_str(params_[i].shape()));
    if (!flat.count(name)) flat[name] = zeros({shard_ * group_->size()});
    int64_t off = 0;
    for (size_t k = 0; k < i; ++k) off += params_[k].numel();
    flat[name].narrow(0, off, t.numel()).copy_(t.reshape({-1}));
  }
  for (auto& [name, f] : flat) shard["state.0." + name] = f.narrow(0, int64_t(group_->rank()) * shard_, shard_).clone();
  inner_->load_state_dict(shard);
}

}  // namespace engine::dist
