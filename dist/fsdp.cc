#include "dist/fsdp.h"

#include <algorithm>
#include <map>

#include "autograd/variable.h"
#include "dist/dist.h"
#include "dist/fsdp_unit.h"
#include "dist/same_model.h"
#include "dist/tcp_group.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace engine::dist {

using nn::Variable;

const char* sharding_strategy_name(ShardingStrategy s) {
  switch (s) {
    case ShardingStrategy::FULL_SHARD: return "FULL_SHARD";
    case ShardingStrategy::SHARD_GRAD_OP: return "SHARD_GRAD_OP";
    case ShardingStrategy::NO_SHARD: return "NO_SHARD";
    case ShardingStrategy::HYBRID_SHARD: return "HYBRID_SHARD";
  }
  return "?";
}

namespace {

// Runs a child module as one unit: gathered before, released after (by the strategy).
class UnitModule : public nn::Module {
 public:
  UnitModule(FullyShardedDataParallel* owner, size_t unit, std::shared_ptr<nn::Module> inner)
      : owner_(owner), unit_(unit), inner_(register_module("module", std::move(inner))) {}
  Variable forward(const Variable& x) override {
    owner_->before_forward(unit_);
    Variable y = (*inner_)(x);
    owner_->after_forward(unit_, y);
    return y;
  }

 private:
  FullyShardedDataParallel* owner_;
  size_t unit_;
  std::shared_ptr<nn::Module> inner_;
};

std::vector<int> block(int first, int count, int stride) {
  std::vector<int> r;
  for (int i = 0; i < count; ++i) r.push_back(first + i * stride);
  return r;
}

}  // namespace

FullyShardedDataParallel::FullyShardedDataParallel(std::shared_ptr<nn::Module> model, FSDPOptions options)
    : model_(std::move(model)), options_(options), group_(options.group ? options.group : &default_group()) {
  ENGINE_REQUIRE(model_ != nullptr, "[FSDP] the model is null");
  shard_group_ = group_;
  if (options_.sharding_strategy == ShardingStrategy::HYBRID_SHARD) {
    int per_node = options_.ranks_per_node;
    if (per_node == 0) {
      auto* tcp = dynamic_cast<ProcessGroupTCP*>(group_);
      ENGINE_REQUIRE(tcp != nullptr, "[FSDP] HYBRID_SHARD on the ", group_->backend(),
                     " backend needs FSDPOptions::ranks_per_node");
      per_node = int(tcp->local_ranks().size());
    }
    ENGINE_REQUIRE(per_node >= 1 && group_->size() % per_node == 0, "[FSDP] HYBRID_SHARD: ", group_->size(),
                   " ranks do not split into machines of ", per_node);
    // Every rank makes every group, in the same order; each keeps the two it is in.
    const int nodes = group_->size() / per_node;
    for (int n = 0; n < nodes; ++n)
      if (auto g = group_->new_group(block(n * per_node, per_node, 1))) shard_ = g;
    for (int l = 0; l < per_node; ++l)
      if (auto g = group_->new_group(block(l, nodes, per_node))) replica_ = g;
    shard_group_ = shard_.get();
  }
  // Every rank starts from rank 0's parameters and buffers, as DDP does.
  std::vector<std::string> names;
  std::vector<nn::Variable> params;
  for (auto& [name, p] : model_->named_parameters()) names.push_back(name), params.push_back(p);
  for (size_t i = 0; i < params.size(); ++i)
    ENGINE_REQUIRE(params[i].trained_through().empty(), "[FSDP] parameter \"", names[i],
                   "\" is already trained through something else (", params[i].trained_through(),
                   "): wrap a model once, and use that wrapper");
  check_same_parameters(*group_, params, names, "[FSDP]");
  for (auto& p : params) group_->broadcast(p.data(), 0).wait();
  for (auto& [name, b] : model_->named_buffers()) {
    group_->broadcast(b, 0).wait();
    buffers_.push_back({name, b});
  }
  build_units();
}

FullyShardedDataParallel::~FullyShardedDataParallel() {
  try {
    finish_reduce();
    drop_prefetches();
  } catch (...) {  // the group failed: nothing left to wait for
  }
}

bool FullyShardedDataParallel::reshards_after_forward() const {
  return options_.sharding_strategy == ShardingStrategy::FULL_SHARD ||
         options_.sharding_strategy == ShardingStrategy::HYBRID_SHARD;
}

void FullyShardedDataParallel::add_full(long bytes) {
  memory_.full_params_now = size_t(long(memory_.full_params_now) + bytes);
  memory_.full_params_peak = std::max(memory_.full_params_peak, memory_.full_params_now);
}

// grads_now_: the unsharded gradients in flight (parameters' .grad, a unit's flat buffer);
// the shards' gradients are counted where they are, since the optimizer may drop them.
void FullyShardedDataParallel::add_grad(long bytes) {
  grads_now_ = size_t(long(grads_now_) + bytes);
  size_t shards = 0;
  for (auto& u : units_)
    if (u->flat_shard.grad().defined()) shards += u->flat_shard.grad().nbytes();
  memory_.grads_peak = std::max(memory_.grads_peak, grads_now_ + shards);
}

void FullyShardedDataParallel::reset_peak_memory() {
  memory_.full_params_peak = memory_.full_params_now;
  memory_.grads_peak = grads_now_;
}

// Units: each child holding parameters, in order, then the model's own parameters.
void FullyShardedDataParallel::build_units() {
  const bool no_shard = options_.sharding_strategy == ShardingStrategy::NO_SHARD;
  const std::pair<int64_t, int64_t> position = shard_position();  // (not a structured binding: the lambda uses it)
  const int64_t r = position.first, n = position.second;
  std::vector<std::pair<std::string, std::shared_ptr<nn::Module>>> wrapped;
  auto add_unit = [&](const std::string& name, const std::vector<std::pair<std::string, Variable>>& params) {
    auto u = std::make_unique<Unit>();
    u->name = name;
    u->frozen = !params.front().second.requires_grad();  // all or none (checked before any unit is built)
    int64_t total = 0;
    for (auto& [pname, p] : params) {
      u->names.push_back(name.empty() ? pname : name + "." + pname);
      u->params.push_back(p);
      u->offsets.push_back(total);
      total += p.numel();
    }
    u->padded = (total + n - 1) / n * n;
    u->shard = u->padded / n;
    u->full = zeros({u->padded});
    for (size_t i = 0; i < u->params.size(); ++i) {
      Variable& p = u->params[i];
      Tensor slot = u->full.narrow(0, u->offsets[i], p.numel()).view(p.shape());
      slot.copy_(p.data());
      p.set_data(slot);  // the parameter is now a view of the flat buffer
      p.set_trained_through("it is in FSDP's unit \"" + name +
                            "\", which trains its flat shard: optimize "
                            "fsdp.parameters() (the shards), not the wrapped model's parameters(); with FSDP, "
                            "call fsdp.clip_grad_norm_ to clip");
    }
    // NO_SHARD: the shard is the whole buffer (the optimizer updates the views' memory).
    const Tensor shard = no_shard ? u->full : u->full.narrow(0, r * u->shard, u->shard).clone();
    u->flat_shard = register_parameter((name.empty() ? "" : name + ".") + "flat_param", shard);
    if (u->frozen) u->flat_shard.set_requires_grad(false);  // an optimizer leaves it alone
    memory_.sharded_params += size_t(u->shard) * 4;
    u->fresh = true;
    add_full(u->padded * 4);
    const size_t k = units_.size();
    for (auto& p : u->params)
      if (!u->frozen)
        p.register_post_accumulate_grad_hook([this, k](Variable& leaf) {
          const Tensor& flat = units_[k]->flat_grad;
          if (!flat.defined() || leaf.grad().storage() != flat.storage()) add_grad(long(leaf.grad().nbytes()));
          on_grad_ready(k);
        });
    units_.push_back(std::move(u));
    return k;
  };
  // The units' parameters: each child's, then the model's own that no child holds.
  struct Planned {
    std::string name;
    std::vector<std::pair<std::string, Variable>> params;
    std::shared_ptr<nn::Module> child;  // null for the model's own parameters
  };
  std::vector<Planned> plan;
  std::vector<std::pair<std::string, Variable>> own;
  for (auto& [pname, p] : model_->named_parameters()) own.push_back({pname, p});
  for (auto& [cname, child] : model_->children()) {
    auto params = child->named_parameters();
    if (params.empty()) continue;
    for (auto& named : params) {
      const auto& impl = named.second.impl();  // (a lambda may not capture a structured binding in C++17)
      own.erase(std::remove_if(own.begin(), own.end(), [&](auto& e) { return e.second.impl() == impl; }), own.end());
    }
    plan.push_back({cname, params, child});
  }
  if (!own.empty()) plan.push_back({"", own, nullptr});
  // A parameter in two children (one layer placed twice, as weight tying does) would be a
  // view of two units' flat buffers at once: refused before anything changes (PyTorch's
  // FSDP, too, needs shared parameters in one unit).
  std::map<const void*, std::string> holder;  // parameter -> the first unit that has it
  for (const Planned& unit : plan)
    for (auto& [pname, p] : unit.params) {
      const auto [first, fresh] = holder.emplace(p.impl().get(), unit.name);
      ENGINE_REQUIRE(fresh, "[FSDP] the model's children \"", first->second, "\" and \"", unit.name,
                     "\" share the parameter \"", pname,
                     "\" (one layer placed twice?): FSDP makes each child a unit with a flat shard of its own, so "
                     "a parameter cannot be in two. Put the shared layer in one child that runs it twice, or use DDP");
    }
  // A unit becomes one flat shard, trained or frozen as a whole (as PyTorch's FSDP without
  // use_orig_params): a layer half frozen is refused before anything is changed.
  for (const Planned& unit : plan)
    for (auto& [pname, p] : unit.params)
      ENGINE_REQUIRE(p.requires_grad() == unit.params.front().second.requires_grad(), "[FSDP] layer \"", unit.name,
                     "\" has \"", p.requires_grad() ? unit.params.front().first : pname,
                     "\" frozen (requires_grad false) and \"", p.requires_grad() ? pname : unit.params.front().first,
                     "\" trained: FSDP flattens each layer's parameters into one shard, so a layer is frozen or "
                     "trained as a whole. Freeze whole layers, or train with DistributedDataParallel");
  for (const Planned& unit : plan) {
    const size_t k = add_unit(unit.name, unit.params);
    if (unit.child) wrapped.push_back({unit.name, std::make_shared<UnitModule>(this, k, unit.child)});
  }
  for (auto& [cname, unit] : wrapped) model_->set_child(cname, unit);
  for (auto& u : units_) release(*u);  // gathered again when needed (NO_SHARD: kept)
}

// The unit's flat buffer gets its memory back and the shards are all-gathered straight
// into it, in the background (a prefetch) or for materialize() to wait on.
void FullyShardedDataParallel::start_gather(Unit& u) {
  if (u.fresh || u.gathering || options_.sharding_strategy == ShardingStrategy::NO_SHARD) return;
  if (u.full.storage()->released()) {
    u.full.storage()->reallocate();
    add_full(u.padded * 4);
  }
  u.gathering = true;
  u.gather_work = shard_group_->all_gather_into_tensor(u.full, u.flat_shard.data());
}

void FullyShardedDataParallel::materialize(Unit& u) {
  if (u.fresh || options_.sharding_strategy == ShardingStrategy::NO_SHARD) return;
  start_gather(u);
  u.gather_work.wait();
  u.gathering = false;
  u.fresh = true;
}

void FullyShardedDataParallel::release(Unit& u) {
  if (options_.sharding_strategy == ShardingStrategy::NO_SHARD) return;
  if (!u.full.storage()->released()) {
    u.full.storage()->release();
    add_full(-u.padded * 4);
  }
  u.fresh = false;
}

// A prefetched all-gather that was never used (its unit did not run) holds values from
// before the optimizer's step: wait for it and drop them.
void FullyShardedDataParallel::drop_prefetches() {
  for (auto& u : units_)
    if (u->gathering) {
      u->gather_work.wait();
      u->gathering = false;
      release(*u);
    }
}

nn::Variable FullyShardedDataParallel::forward(const nn::Variable& x) {
  drop_prefetches();
  // The model's own parameters (the root unit, last) are needed for the whole forward.
  if (!units_.empty() && units_.back()->name.empty()) {
    materialize(*units_.back());
    units_.back()->ran_forward = true;
  }
  return (*model_)(x);
}

void FullyShardedDataParallel::before_forward(size_t k) {
  Unit& u = *units_[k];
  materialize(u);
  u.ran_forward = true;
  if (options_.forward_prefetch && k + 1 < units_.size() && !units_[k + 1]->name.empty()) start_gather(*units_[k + 1]);
}

void FullyShardedDataParallel::after_forward(size_t k, Variable& out) {
  Unit& u = *units_[k];
  if (out.requires_grad() && autograd::is_grad_enabled())
    out.register_hook([this, k](const Tensor&) { before_backward(k); });
  // FULL_SHARD frees the parameters now; SHARD_GRAD_OP keeps them for backward (but not
  // outside training: evaluation leaves nothing gathered).
  if (reshards_after_forward() || !autograd::is_grad_enabled() || !out.requires_grad()) release(u);
}

void FullyShardedDataParallel::before_backward(size_t k) {
  if (!in_backward_) {
    in_backward_ = true;
    autograd::queue_callback([this] { end_of_backward(); });
  }
  Unit& u = *units_[k];
  materialize(u);        // FULL_SHARD: gathered again (a frozen layer too: the gradient of its input needs it)
  if (u.frozen) return;  // no gradients: released at the end of backward
  // The unit's gradients are born in one flat buffer (a linear layer's weight gradient is
  // computed there directly): no second copy of them before the reduce-scatter.
  if (!u.flat_grad.defined()) {
    u.flat_grad = zeros({u.padded});
    add_grad(u.padded * 4);
    for (size_t i = 0; i < u.params.size(); ++i)
      u.params[i].set_grad_destination(
          u.flat_grad.narrow(0, u.offsets[i], u.params[i].numel()).view(u.params[i].shape()));
  }
  if (options_.forward_prefetch && k > 0 && !units_[k - 1]->reduced) start_gather(*units_[k - 1]);
}

void FullyShardedDataParallel::on_grad_ready(size_t k) {
  Unit& u = *units_[k];
  if (++u.ready == int(u.params.size())) reduce_gradients(u);
}

// The unit's gradients, flattened, averaged over the ranks into the shard's gradient. The
// collective runs in the background while backward computes the earlier units; the one
// before it is finished first, so at most two units' unsharded gradients exist at once.
void FullyShardedDataParallel::reduce_gradients(Unit& u) {
  if (u.reduced) return;
  u.reduced = true;
  finish_reduce();
  Tensor flat = u.flat_grad;
  u.flat_grad = Tensor();
  if (!flat.defined()) {  // the root unit, or a unit whose output got no gradient
    flat = zeros({u.padded});
    add_grad(u.padded * 4);
  }
  for (size_t i = 0; i < u.params.size(); ++i) {
    Variable& p = u.params[i];
    p.set_grad_destination(Tensor());
    if (!p.grad().defined()) continue;
    if (p.grad().storage() != flat.storage()) {  // computed elsewhere: copied in, then dropped
      flat.narrow(0, u.offsets[i], p.numel()).copy_(p.grad().reshape({-1}));
      add_grad(-long(p.grad().nbytes()));
    }
    p.zero_grad();
  }
  // The parameters are not needed again this step (and the optimizer will change the shard).
  if (options_.sharding_strategy != ShardingStrategy::NO_SHARD) release(u);
  pending_.unit = &u;
  pending_.flat = flat;
  if (options_.sharding_strategy == ShardingStrategy::NO_SHARD) {
    pending_.shard_grad = flat;
    pending_.work = group_->all_reduce(flat, ReduceOp::Avg);
  } else {
    pending_.shard_grad = zeros({u.shard});
    pending_.work = shard_group_->reduce_scatter(pending_.shard_grad, flat, ReduceOp::Avg);
  }
}

// Waits for the reduction in flight and adds its result into the shard's gradient.
void FullyShardedDataParallel::finish_reduce() {
  if (!pending_.unit) return;
  Pending p = std::move(pending_);
  pending_ = Pending{};
  p.work.wait();
  if (replica_) replica_->all_reduce(p.shard_grad, ReduceOp::Avg).wait();  // HYBRID: across machines
  Variable& s = p.unit->flat_shard;
  if (s.grad().defined())
    s.set_grad(s.grad() + p.shard_grad);
  else
    s.set_grad(p.shard_grad);
  p.flat = Tensor();
  add_grad(-p.unit->padded * 4);  // the flat buffer goes; the shard's gradient is counted as it is
}

void FullyShardedDataParallel::end_of_backward() {
  // Units whose gradients never all arrived (a parameter unused this step): reduced now,
  // the missing ones as zeros, so every rank makes the same collectives.
  for (auto& u : units_) {
    if (u->frozen && options_.sharding_strategy != ShardingStrategy::NO_SHARD) release(*u);
    if (u->ran_forward && !u->reduced && !u->frozen) reduce_gradients(*u);
  }
  finish_reduce();
  for (auto& u : units_) u->ready = 0, u->reduced = false, u->ran_forward = false;
  drop_prefetches();
  in_backward_ = false;
}

}  // namespace engine::dist
