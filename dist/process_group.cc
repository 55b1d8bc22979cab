#include "dist/process_group.h"

#include "tensor/check.h"

namespace engine::dist {

const char* reduce_op_name(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return "SUM";
    case ReduceOp::Avg: return "AVG";
    case ReduceOp::Min: return "MIN";
    case ReduceOp::Max: return "MAX";
    case ReduceOp::Product: return "PRODUCT";
  }
  return "?";
}

Work::Work() : state_(std::make_shared<State>()) {}

void Work::wait() const {
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->error) return;
  // Each waiter gets its own copy of an engine error. Rethrowing the stored one would hand
  // the same exception object to several threads, to be read by one while another drops
  // the last reference to it (the reference count lives in the uninstrumented C++
  // runtime, so ThreadSanitizer cannot see that it orders the two).
  try {
    std::rethrow_exception(state_->error);
  } catch (const std::exception& e) {  // out of memory in a collective, too, reaches the caller as an Error
    throw Error(e.what());
  }
}

bool Work::is_completed() const {
  std::lock_guard<std::mutex> lock(state_->mu);
  return state_->done;
}

void Work::finish() const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->done = true;
  }
  state_->cv.notify_all();
}

void Work::fail(std::exception_ptr error) const {
  {
    std::lock_guard<std::mutex> lock(state_->mu);
    state_->error = std::move(error);
    state_->done = true;
  }
  state_->cv.notify_all();
}

}  // namespace engine::dist
