#include "dist/join.h"

#include <cstdio>
#include <exception>

#include "dist/broadcast_state.h"
#include "dist/sync_batchnorm.h"
#include "tensor/ops.h"

namespace engine::dist {
namespace {

// The name of the first SyncBatchNorm in `m` (a path such as "3.1"), or "" if none.
std::string first_sync_batchnorm(const nn::Module& m, const std::string& path) {
  if (dynamic_cast<const SyncBatchNorm*>(&m)) return path.empty() ? "(the model itself)" : path;
  for (const auto& [name, child] : m.children())
    if (child) {
      std::string found = first_sync_batchnorm(*child, path.empty() ? name : path + "." + name);
      if (!found.empty()) return found;
    }
  return "";
}

}  // namespace

Join::Join(DistributedDataParallel& ddp, std::vector<Joinable*> others, JoinSync sync)
    : ddp_(ddp), others_(std::move(others)), sync_(std::move(sync)) {
  ENGINE_REQUIRE(ddp_.join_ == nullptr, "[Join] this DistributedDataParallel is already in a Join");
  ENGINE_REQUIRE(!ddp_.hook_,
                 "[Join] does not work with a communication hook (a finished rank would have to shadow "
                 "the hook's own collectives)");
  const std::string sync_bn = first_sync_batchnorm(ddp_.module(), "");
  ENGINE_REQUIRE(sync_bn.empty(), "[Join] the model's layer \"", sync_bn,
                 "\" is a SyncBatchNorm: its forward and backward are collectives over every rank's batch, which a "
                 "rank out of data cannot take part in. Give every rank the same number of batches instead "
                 "(DistributedSampler with drop_last), or use BatchNorm");
  for (size_t i = 0; i < others_.size(); ++i) {
    ENGINE_REQUIRE(others_[i] != nullptr, "[Join] joinable ", i, " is null");
    ENGINE_REQUIRE(others_[i]->join_process_group() == ddp_.group_, "[Join] joinable ", i,
                   " runs its collectives on another process group than the DistributedDataParallel's: a finished "
                   "rank shadows one group");
  }
  for (size_t i = 0; i < sync_.optimizers.size(); ++i)
    ENGINE_REQUIRE(sync_.optimizers[i] != nullptr, "[Join] optimizer ", i, " is null");
  ddp_.join_ = this;
  for (Joinable* j : others_) j->join_begins();
}

Join::~Join() {
  ddp_.join_ = nullptr;
  for (Joinable* j : others_) j->join_ends();
  if (!finished_ && std::uncaught_exceptions() == 0)
    std::fprintf(stderr, "[Join] destroyed without finish(): the other ranks may wait for this one\n");
}

// One all-reduce (sum) of a vector with a 1 at each rank still training: their count, and
// the highest of them, whose buffers (batch-norm statistics) the step broadcasts, as
// PyTorch's DDP takes them from its "authoritative rank" under a Join. Rank 0's would be
// stale once it has finished.
int64_t Join::count_training(bool still_training) {
  const int world = ddp_.group_->size();
  std::vector<int64_t> flags(size_t(world), 0);
  if (still_training) flags[size_t(ddp_.group_->rank())] = 1;
  Tensor t = from_vector(flags);
  ddp_.group_->all_reduce(t, ReduceOp::Sum).wait();
  const std::vector<int64_t> training = t.to_vector<int64_t>();
  int64_t count = 0;
  buffer_root_ = 0;
  for (int r = 0; r < world; ++r)
    if (training[size_t(r)] > 0) ++count, buffer_root_ = r;
  if (count > 0)
    for (Joinable* j : others_) j->join_step_begins(int(count), buffer_root_);
  return count;
}

// What a training rank's step does collectively, with nothing to contribute: the buffer
// broadcasts of its forward, then one all-reduce per bucket, in bucket order, of zeros.
void Join::shadow_step() {
  ddp_.broadcast_buffers_if_needed(buffer_root_);
  ddp_.reduce_zero_buckets();
  for (Joinable* j : others_) j->join_shadow_step();
}

// The last rank to finish took every step: its replica is the one to keep.
void Join::sync_final_model(bool last_to_finish) {
  Tensor who = from_vector(std::vector<int64_t>{last_to_finish ? int64_t(ddp_.group_->rank()) : -1});
  ddp_.group_->all_reduce(who, ReduceOp::Max).wait();
  const int root = int(who.to_vector<int64_t>()[0]);
  ddp_.broadcast_state(root);
  for (nn::Optimizer* opt : sync_.optimizers) sync_optimizer(*opt, root);
  if (sync_.scaler != nullptr) sync_scaler(root);
}

// The last finisher's optimizer state. The learning rate travels in the state as float32
// (PyTorch's layout); it is sent again as the bits of its double, so that a schedule
// multiplying it step by step goes on from the same number on every rank.
void Join::sync_optimizer(nn::Optimizer& opt, int root) {
  nn::StateDict state = opt.state_dict();
  broadcast_state_dict(*ddp_.group_, &state, root);
  opt.load_state_dict(state);
  opt.set_lr(broadcast_doubles(*ddp_.group_, {opt.lr()}, root)[0]);
}

// The last finisher's scale and growth tracker, so that from the next step on every rank
// scales its loss, and unscales the averaged gradient, by the same number. A disabled
// scaler (no float16) has an empty state.
void Join::sync_scaler(int root) {
  nn::StateDict state = sync_.scaler->state_dict();
  const bool enabled = !state.empty();
  broadcast_state_dict(*ddp_.group_, &state, root);
  const bool root_enabled = !state.empty();
  ENGINE_REQUIRE(root_enabled == enabled, "[Join] rank ", root, "'s GradScaler is ",
                 root_enabled ? "enabled" : "disabled", " but rank ", ddp_.group_->rank(), "'s is ",
                 enabled ? "enabled" : "disabled", ": give every rank the same GradScaler options");
  if (enabled) sync_.scaler->load_state_dict(state);
}

int Join::finish() {
  ENGINE_REQUIRE(!finished_, "[Join] finish() called twice");
  finished_ = true;
  ddp_.join_ = nullptr;  // from here on this rank's forwards (there are none) would not count
  int shadowed = 0;
  try {
    while (count_training(false) > 0) {
      shadow_step();
      ++shadowed;
    }
  } catch (const Error& e) {
    // The others made a collective this rank does not shadow: say what a finished rank can do.
    if (std::string(e.what()).find("mismatched collectives") == std::string::npos) throw;
    throw Error(std::string(e.what()) +
                ". This rank had run out of data and was shadowing the others' steps under a Join, which "
                "repeats DDP's collectives and those of the joinables given to it (a ZeroRedundancyOptimizer: "
                "Join(ddp, {&optimizer})); any other collective in the training loop cannot be shadowed");
  }
  sync_final_model(shadowed == 0);
  return shadowed;
}

}  // namespace engine::dist
