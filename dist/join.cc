#include "dist/join.h"

#include <cstdio>
#include <exception>

#include "tensor/ops.h"

namespace engine::dist {

Join::Join(DistributedDataParallel& ddp) : ddp_(ddp) {
  ENGINE_REQUIRE(ddp_.join_ == nullptr, "[Join] this DistributedDataParallel is already in a Join");
  ENGINE_REQUIRE(!ddp_.hook_,
                 "[Join] does not work with a communication hook (a finished rank would have to shadow "
                 "the hook's own collectives)");
  ddp_.join_ = this;
}

Join::~Join() {
  ddp_.join_ = nullptr;
  if (!finished_ && std::uncaught_exceptions() == 0)
    std::fprintf(stderr, "[Join] destroyed without finish(): the other ranks may wait for this one\n");
}

int64_t Join::count_training(bool still_training) {
  Tensor n = from_vector(std::vector<int64_t>{still_training ? 1 : 0});
  ddp_.group_->all_reduce(n, ReduceOp::Sum).wait();
  return n.to_vector<int64_t>()[0];
}

// What a training rank's step does collectively, with nothing to contribute: the buffer
// broadcasts of its forward, then one all-reduce per bucket, in bucket order, of zeros.
void Join::shadow_step() {
  ddp_.broadcast_buffers_if_needed();
  ddp_.reduce_zero_buckets();
}

// The last rank to finish took every step: its replica is the one to keep.
void Join::sync_final_model(bool last_to_finish) {
  Tensor who = from_vector(std::vector<int64_t>{last_to_finish ? int64_t(ddp_.group_->rank()) : -1});
  ddp_.group_->all_reduce(who, ReduceOp::Max).wait();
  ddp_.broadcast_state(int(who.to_vector<int64_t>()[0]));
}

int Join::finish() {
  ENGINE_REQUIRE(!finished_, "[Join] finish() called twice");
  finished_ = true;
  ddp_.join_ = nullptr;  // from here on this rank's forwards (there are none) would not count
  int shadowed = 0;
  while (count_training(false) > 0) {
    shadow_step();
    ++shadowed;
  }
  sync_final_model(shadowed == 0);
  return shadowed;
}

}  // namespace engine::dist
