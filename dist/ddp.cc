#include "dist/ddp.h"

#include <mutex>
#include <set>
#include <unordered_set>

#include "dist/dist.h"
#include "dist/join.h"
#include "dist/same_model.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"

namespace engine::dist {

struct DistributedDataParallel::Bucket {
  std::vector<size_t> params;  // indices into params_, in the order they were added
  Tensor buffer;               // every gradient of the bucket, flattened back to back
  size_t pending = 0;          // parameters whose gradient has not arrived yet
  GradBucket view;             // what a communication hook is given
  Future reduced;              // the average, once the all-reduce (or the hook) is done
  bool launched = false;
};

namespace {
// The parameters of every live DDP. Two DDPs over one model would both hook its gradients
// and write each other's buckets while they are being reduced.
std::mutex g_wrapped_mutex;
std::set<const autograd::VariableImpl*> g_wrapped;
}  // namespace

DistributedDataParallel::DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options)
    : module_(std::move(module)), options_(options) {
  ENGINE_REQUIRE(module_ != nullptr, "[DistributedDataParallel] module is null");
  // 0 puts each parameter in its own bucket, infinity all in one; NaN or a negative size
  // would silently do one of those.
  ENGINE_REQUIRE(options_.bucket_cap_mb >= 0 && options_.first_bucket_mb >= 0,
                 "[DistributedDataParallel] bucket_cap_mb and first_bucket_mb must be >= 0 (MiB), got ",
                 options_.bucket_cap_mb, " and ", options_.first_bucket_mb);
  group_ = options_.group ? options_.group : &default_group();
  register_module("module", module_);  // so state_dict() names are "module.<name>", as in PyTorch
  std::vector<std::string> all_names;
  for (auto& [name, p] : module_->named_parameters()) {
    ENGINE_REQUIRE(p.data().dtype() == DType::Float32, "[DistributedDataParallel] parameter \"", name,
                   "\" is not float32");
    all_params_.push_back(p);
    all_names.push_back(name);
    frozen_.push_back(!p.requires_grad());
    if (frozen_.back()) continue;  // a frozen layer is broadcast with the rest, never reduced (as PyTorch)
    names_.push_back(name);
    params_.push_back(p);
  }
  {
    std::lock_guard<std::mutex> lock(g_wrapped_mutex);
    for (size_t i = 0; i < all_params_.size(); ++i)
      ENGINE_REQUIRE(!g_wrapped.count(all_params_[i].impl().get()), "[DistributedDataParallel] parameter \"",
                     all_names[i],
                     "\" is already in another DistributedDataParallel: wrap a model once, and use that wrapper");
    for (auto& p : all_params_) g_wrapped.insert(p.impl().get());
  }
  try {
    check_same_parameters(*group_, all_params_, all_names, "[DistributedDataParallel]");
    broadcast_state(0);  // start from rank 0's weights and buffers, so every replica is identical
    build_buckets();
  } catch (...) {  // no destructor runs: leave the model as it was given, free to wrap again
    for (auto& p : params_) p.set_grad_destination(Tensor());
    release_parameters();
    throw;
  }
  for (size_t i = 0; i < params_.size(); ++i)
    hook_ids_.push_back(params_[i].register_post_accumulate_grad_hook([this, i](nn::Variable&) { on_grad_ready(i); }));
  reset_for_backward();
}

DistributedDataParallel::~DistributedDataParallel() {
  release_parameters();
  for (size_t i = 0; i < params_.size(); ++i) {
    params_[i].remove_hook(hook_ids_[i]);
    params_[i].set_grad_destination(Tensor());
  }
  for (auto& b : buckets_)
    if (b->launched) try {
        b->reduced.wait();
      } catch (const Error&) {}
}

void DistributedDataParallel::release_parameters() {
  std::lock_guard<std::mutex> lock(g_wrapped_mutex);
  for (auto& p : all_params_) g_wrapped.erase(p.impl().get());
}

void DistributedDataParallel::register_comm_hook(CommHook hook) {
  ENGINE_REQUIRE(hook != nullptr, "[DistributedDataParallel] register_comm_hook got an empty hook");
  ENGINE_REQUIRE(!hook_, "[DistributedDataParallel] register_comm_hook can only be called once");
  ENGINE_REQUIRE(join_ == nullptr, "[DistributedDataParallel] communication hooks do not work inside a Join");
  hook_ = std::move(hook);
}

void DistributedDataParallel::build_buckets() {
  // Reverse registration order: the last layer's gradients are ready first.
  const double mib = 1024.0 * 1024.0;
  double cap = options_.first_bucket_mb * mib, bytes = 0;
  where_.assign(params_.size(), {0, 0});
  for (size_t k = params_.size(); k-- > 0;) {
    if (buckets_.empty() || bytes >= cap) {
      if (!buckets_.empty()) cap = options_.bucket_cap_mb * mib;
      buckets_.push_back(std::make_unique<Bucket>());
      bucket_names_.emplace_back();
      bytes = 0;
    }
    Bucket& b = *buckets_.back();
    size_t offset = 0;
    for (size_t q : b.params) offset += size_t(params_[q].numel());
    where_[k] = {buckets_.size() - 1, offset};
    b.params.push_back(k);
    bucket_names_.back().push_back(names_[k]);
    bytes += double(params_[k].numel()) * 4;
  }
  for (auto& b : buckets_) {
    int64_t n = 0;
    for (size_t q : b->params) n += params_[q].numel();
    b->buffer = group_->shared_buffer(n);  // reduced in place where ranks share memory
  }
  for (size_t bi = 0; bi < buckets_.size(); ++bi) {
    GradBucket& v = buckets_[bi]->view;
    v.index = int(bi);
    v.is_last = bi + 1 == buckets_.size();
    v.buffer = buckets_[bi]->buffer;
    v.group = group_;
    for (size_t q : buckets_[bi]->params) v.gradients.push_back(slot(q)), v.names.push_back(names_[q]);
  }
  // Each gradient is computed straight into its slot when the op making it can (linear
  // layers' weights), so mark_ready has nothing to copy.
  if (group_->size() > 1 || options_.reduce_when_alone)
    for (size_t i = 0; i < params_.size(); ++i) params_[i].set_grad_destination(slot(i));
}

Tensor DistributedDataParallel::slot(size_t i) const {
  auto [bi, offset] = where_[i];
  return buckets_[bi]->buffer.narrow(0, int64_t(offset), params_[i].numel()).view(params_[i].shape());
}

void DistributedDataParallel::reset_for_backward() {
  for (auto& b : buckets_) {
    if (b->launched) try {  // a backward that failed part way may have left one in flight
        b->reduced.wait();
      } catch (const Error&) {}
    b->pending = b->params.size();
    b->launched = false;
  }
  ready_.assign(params_.size(), false);
  launched_ = 0;
  finalize_queued_ = false;
}

void DistributedDataParallel::broadcast_state(int root) {
  for (auto& p : all_params_) group_->broadcast(p.data(), root).wait();
  for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, root).wait();
}

void DistributedDataParallel::broadcast_buffers_if_needed(int root) {
  if (options_.broadcast_buffers && group_->size() > 1)
    for (auto& [name, b] : module_->named_buffers()) group_->broadcast(b, root).wait();
}

void DistributedDataParallel::reduce_zero_buckets() {
  for (auto& b : buckets_) {
    b->buffer.zero_();
    group_->all_reduce(b->buffer, ReduceOp::Avg).wait();
  }
  // The others' average lands in .grad here too, as on a rank that trained: an optimizer
  // that steps on every rank (ZeroRedundancyOptimizer under a Join) reads it.
  copy_averages_to_grads();
}

nn::Variable DistributedDataParallel::forward(const nn::Variable& x) {
  // In a Join, each step starts by counting the ranks still training (join.h); a rank
  // that has finished answers 0 and shadows the rest of the step.
  int buffer_root = 0;
  bool all_training = true;  // no rank has finished (always, outside a Join)
  if (join_ && autograd::is_grad_enabled()) {
    ENGINE_REQUIRE(sync_, "[Join] no_sync() is not supported inside a Join");
    all_training = join_->count_training(true) == group_->size();
    buffer_root = join_->buffer_root();  // rank 0 may have finished: its buffers stopped changing
  }
  check_frozen_unchanged();
  // A finished rank's weights stop changing (the Join syncs them at its end): the replicas
  // are compared only at forwards every rank takes.
  if (all_training) check_replicas_if_due();
  broadcast_buffers_if_needed(buffer_root);
  nn::Variable out = (*module_)(x);
  if (options_.find_unused_parameters && sync_ && group_->size() > 1 && autograd::is_grad_enabled()) {
    // Parameters the output does not depend on will get no gradient: count them as ready
    // (with zeros) now, so their buckets do not wait for them.
    std::unordered_set<const autograd::VariableImpl*> used;
    for (auto& leaf : autograd::reachable_leaves(out)) used.insert(leaf.get());
    for (size_t i = 0; i < params_.size(); ++i)
      if (!used.count(params_[i].impl().get())) mark_ready(i, nullptr);
    launch_ready_buckets();
  }
  return out;
}

// The buckets hold the parameters that required grad when DDP was built. One unfrozen since
// would train without being averaged, and the replicas would drift apart with no error;
// one frozen since would leave its bucket waiting.
void DistributedDataParallel::check_frozen_unchanged() const {
  for (size_t i = 0; i < all_params_.size(); ++i)
    if (all_params_[i].requires_grad() == frozen_[i]) {
      std::string name;
      for (auto& [n, p] : module_->named_parameters())
        if (p.impl() == all_params_[i].impl()) name = n;
      throw Error("[DistributedDataParallel] parameter \"" + name + "\" was " + (frozen_[i] ? "unfrozen" : "frozen") +
                  " (set_requires_grad) after the model was wrapped: DDP reduces the parameters that required grad "
                  "when it was built. Freeze or unfreeze layers first, then wrap the model (or wrap it again)");
    }
}

void DistributedDataParallel::on_grad_ready(size_t i) {
  if (!sync_) return;  // no_sync: gradients just accumulate in .grad
  if (group_->size() == 1 && !options_.reduce_when_alone && !hook_) return;  // one rank's average is its gradient
  if (!finalize_queued_) {
    finalize_queued_ = true;
    autograd::queue_callback([this] { finalize(); });
  }
  mark_ready(i, &params_[i].grad());
  launch_ready_buckets();
}

void DistributedDataParallel::mark_ready(size_t i, const Tensor* grad) {
  if (ready_[i]) return;
  ready_[i] = true;
  Tensor into = slot(i);
  if (!grad || !grad->defined())
    into.zero_();
  else if (grad->data<float>() != into.data<float>())
    into.copy_(*grad);  // else: computed there already
  --buckets_[where_[i].first]->pending;
}

void DistributedDataParallel::launch_ready_buckets() {
  // Strictly in bucket order, so every rank issues the same all-reduces in the same order.
  while (launched_ < int(buckets_.size()) && buckets_[size_t(launched_)]->pending == 0) {
    Bucket& b = *buckets_[size_t(launched_)];
    b.reduced = hook_ ? hook_(b.view) : Future(group_->all_reduce(b.buffer, ReduceOp::Avg), b.buffer);
    b.launched = true;
    ++launched_;
  }
}

void DistributedDataParallel::finalize() {
  if (launched_ < int(buckets_.size())) {
    std::string missing;
    for (size_t i = 0; i < params_.size(); ++i)
      if (!ready_[i]) missing += (missing.empty() ? "" : ", ") + names_[i];
    reset_for_backward();
    throw Error("[DistributedDataParallel] these parameters received no gradient in this backward: " + missing +
                ". If some parameters are unused on purpose (a branch not taken), construct DDP with "
                "find_unused_parameters = true; otherwise make the loss depend on them. (Every rank must reduce every "
                "bucket, so a missing gradient would leave the others waiting.)");
  }
  for (auto& b : buckets_) {
    const Tensor avg = b->reduced.wait();
    ENGINE_REQUIRE(avg.defined() && avg.dtype() == DType::Float32 && avg.numel() == b->buffer.numel(),
                   "[DistributedDataParallel] the communication hook's result must be a float32 tensor of ",
                   b->buffer.numel(), " elements (the bucket), got ",
                   avg.defined() ? std::to_string(avg.numel()) + " " + dtype_name(avg.dtype()) : "none");
    if (avg.data<float>() != b->buffer.data<float>()) b->buffer.copy_(avg.reshape(b->buffer.shape()));
  }
  copy_averages_to_grads();
  for (auto& b : buckets_) b->launched = false;  // waited for above
  reset_for_backward();
}

// The averages go back into .grad, where the optimizer reads them.
void DistributedDataParallel::copy_averages_to_grads() {
  for (size_t i = 0; i < params_.size(); ++i) {
    const Tensor avg = slot(i);
    const Tensor& grad = params_[i].grad();
    if (options_.gradient_as_bucket_view)
      params_[i].set_grad(avg);
    else if (grad.defined() && grad.data<float>() != avg.data<float>())
      params_[i].mutable_grad().copy_(avg);
    else
      params_[i].set_grad(avg.clone());  // none yet, or computed in the bucket: .grad gets its own copy
  }
}

void save_on_rank0(const std::string& path, const nn::StateDict& state, ProcessGroup* group) {
  ProcessGroup& g = group ? *group : default_group();
  if (g.rank() == 0) nn::save_safetensors(path, state);
  g.barrier().wait();
}

}  // namespace engine::dist
