#include "lessons/05_inside_ddp/sync.h"

#include "tensor/check.h"

namespace inside {

using namespace engine;
using dist::ReduceOp;

void naive_sync(std::vector<Variable> params, ProcessGroup& group) {
  for (auto& p : params) group.all_reduce(p.mutable_grad(), ReduceOp::Avg).wait();
}

HookSync::HookSync(std::vector<Variable> params, ProcessGroup& group) : params_(std::move(params)) {
  // Backward calls the hook the moment a parameter's gradient is complete. Every rank runs
  // the same graph, so the hooks fire in the same order everywhere, and the all-reduces
  // are issued in the same order: what collectives require.
  for (auto& p : params_)
    hooks_.push_back(p.register_post_accumulate_grad_hook(
        [this, &group](Variable& v) { pending_.push_back(group.all_reduce(v.mutable_grad(), ReduceOp::Avg)); }));
}

HookSync::~HookSync() {
  for (size_t i = 0; i < params_.size(); ++i) params_[i].remove_hook(hooks_[i]);
}

void HookSync::wait() {
  for (auto& w : pending_) w.wait();
  pending_.clear();
}

std::vector<std::vector<size_t>> plan_buckets(const std::vector<Variable>& params, double cap_mb) {
  std::vector<std::vector<size_t>> plan;
  double bytes = 0;
  for (size_t k = params.size(); k-- > 0;) {
    if (plan.empty() || bytes >= cap_mb * 1024 * 1024) plan.emplace_back(), bytes = 0;
    plan.back().push_back(k);
    bytes += double(params[k].numel()) * 4;
  }
  return plan;
}

BucketSync::BucketSync(std::vector<Variable> params, ProcessGroup& group, double cap_mb)
    : params_(std::move(params)), group_(group), plan_(plan_buckets(params_, cap_mb)) {
  where_.resize(params_.size());
  for (size_t b = 0; b < plan_.size(); ++b) {
    int64_t offset = 0;
    for (size_t k : plan_[b]) where_[k] = {b, offset}, offset += params_[k].numel();
    buffers_.push_back(zeros({offset}));
  }
  for (auto& bucket : plan_) pending_.push_back(int(bucket.size()));
  for (size_t k = 0; k < params_.size(); ++k)
    hooks_.push_back(params_[k].register_post_accumulate_grad_hook([this, k](Variable&) { ready(k); }));
}

BucketSync::~BucketSync() {
  for (size_t k = 0; k < params_.size(); ++k) params_[k].remove_hook(hooks_[k]);
}

// Copy the gradient into its bucket; launch every full bucket, strictly in bucket order
// (a later bucket that fills first waits for the earlier ones: the order must match on
// every rank).
void BucketSync::ready(size_t k) {
  const auto [b, offset] = where_[k];
  buffers_[b].narrow(0, offset, params_[k].numel()).copy_(params_[k].grad().reshape({-1}));
  --pending_[b];
  while (launched_ < plan_.size() && pending_[launched_] == 0) {
    work_.push_back(group_.all_reduce(buffers_[launched_], ReduceOp::Avg));
    ++launched_;
  }
}

void BucketSync::wait() {
  ENGINE_REQUIRE(launched_ == plan_.size(), "[BucketSync] backward ended with ", plan_.size() - launched_,
                 " bucket(s) still waiting for gradients");
  for (auto& w : work_) w.wait();
  for (size_t k = 0; k < params_.size(); ++k) {
    const auto [b, offset] = where_[k];
    params_[k].mutable_grad().copy_(buffers_[b].narrow(0, offset, params_[k].numel()).view(params_[k].shape()));
  }
  work_.clear();
  launched_ = 0;
  for (size_t b = 0; b < plan_.size(); ++b) pending_[b] = int(plan_[b].size());
}

}  // namespace inside
