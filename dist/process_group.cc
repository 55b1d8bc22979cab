#include "dist/process_group.h"

#include <algorithm>
#include <numeric>

#include "dist/socket.h"
#include "tensor/check.h"
#include "tensor/ops.h"

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

Work::Work() : state_(std::make_shared<State>()) { state_->done = true; }

Work Work::pending() {
  Work w;
  w.state_->done = false;
  return w;
}

void Work::wait() const {
  // First run queued work here (this one's, and any queued before it) rather than sleep
  // while another thread is woken to do it: a wake-up can cost more than a small collective.
  while (state_->help && !is_completed() && state_->help()) {}
  std::unique_lock<std::mutex> lock(state_->mu);
  state_->cv.wait(lock, [&] { return state_->done; });
  if (!state_->error) return;
  // Each waiter gets its own copy of an engine error. Rethrowing the stored one would hand
  // the same exception object to several threads, to be read by one while another drops
  // the last reference to it (the reference count lives in the uninstrumented C++
  // runtime, so ThreadSanitizer cannot see that it orders the two).
  try {
    std::rethrow_exception(state_->error);
  } catch (const TimedOut& e) {  // kept apart: destroy_process_group tells these from a peer that hung up
    throw TimedOut(e.what());
  } catch (const LinkLost& e) {
    throw LinkLost(e.what());
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

namespace engine::dist {

std::vector<int> checked_group_ranks(std::vector<int> ranks, int size) {
  ENGINE_REQUIRE(!ranks.empty(), "[new_group] the list of ranks is empty");
  std::sort(ranks.begin(), ranks.end());
  for (size_t i = 0; i < ranks.size(); ++i) {
    ENGINE_REQUIRE(ranks[i] >= 0 && ranks[i] < size, "[new_group] rank ", ranks[i], " is outside 0..", size - 1);
    ENGINE_REQUIRE(i == 0 || ranks[i] != ranks[i - 1], "[new_group] rank ", ranks[i], " is listed twice");
  }
  return ranks;
}

std::vector<int64_t> all_to_all_rows(const char* which, std::vector<int64_t> splits, const Tensor& t, int size) {
  const int64_t rows = t.dim() == 0 ? 1 : t.size(0);
  if (splits.empty()) {
    ENGINE_REQUIRE(rows % size == 0, "[all_to_all] ", which, " has ", rows, " rows, not a multiple of the world size ",
                   size, ": give ", which, "_splits");
    return std::vector<int64_t>(size_t(size), rows / size);
  }
  ENGINE_REQUIRE(int(splits.size()) == size, "[all_to_all] ", which, "_splits has ", splits.size(),
                 " entries; the world size is ", size);
  for (int64_t s : splits) ENGINE_REQUIRE(s >= 0, "[all_to_all] ", which, "_splits holds a negative size ", s);
  ENGINE_REQUIRE(std::accumulate(splits.begin(), splits.end(), int64_t(0)) == rows, "[all_to_all] ", which,
                 "_splits add up to ", std::accumulate(splits.begin(), splits.end(), int64_t(0)), " rows, but ", which,
                 " has ", rows);
  return splits;
}

bool given_outputs(const char* op, const std::vector<Tensor>& outputs, const Tensor& input, int size) {
  if (outputs.empty()) return false;
  ENGINE_REQUIRE(outputs.size() == size_t(size), "[", op, "] the output list holds ", outputs.size(),
                 " tensors, the group has ", size, " ranks: give one per rank (or an empty list to have them made)");
  for (size_t r = 0; r < outputs.size(); ++r) {
    const Tensor& o = outputs[r];
    ENGINE_REQUIRE(o.defined(), "[", op, "] output ", r, " is undefined");
    ENGINE_REQUIRE(o.shape() == input.shape() && o.dtype() == input.dtype() && o.device() == input.device(), "[", op,
                   "] output ", r, " is ", shape_str(o.shape()), " ", dtype_name(o.dtype()), " on ", o.device().str(),
                   ", the input ", shape_str(input.shape()), " ", dtype_name(input.dtype()), " on ",
                   input.device().str(), ": every output must match the input");
    ENGINE_REQUIRE(!repeats_elements(o.shape(), o.strides()), "[", op, "] output ", r, " (shape ", shape_str(o.shape()),
                   ", strides ", shape_str(o.strides()),
                   ") repeats elements, as an expand() does: it cannot be written into");
  }
  return true;
}

// Backends without these collectives say so by name.
namespace {
[[noreturn]] void unsupported(const ProcessGroup& g, const char* what) {
  throw Error(std::string("[") + what + "] the " + g.backend() + " backend does not implement " + what);
}
}  // namespace

Work ProcessGroup::all_gather_into_tensor(Tensor output, Tensor input) {
  ENGINE_REQUIRE(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
                 "[all_gather_into_tensor] output of ", output.numel(), " elements must hold world size (", size_,
                 ") x input (", input.numel(), ")");
  std::vector<Tensor> parts;
  all_gather(&parts, input).wait();
  Tensor flat = output.reshape({-1});
  for (int r = 0; r < size_; ++r)
    flat.narrow(0, int64_t(r) * input.numel(), input.numel()).copy_(parts[size_t(r)].reshape({-1}));
  return Work();  // done already
}

Work ProcessGroup::gather(std::vector<Tensor>*, Tensor, int) { unsupported(*this, "gather"); }
Work ProcessGroup::scatter(Tensor, const std::vector<Tensor>&, int) { unsupported(*this, "scatter"); }
Work ProcessGroup::reduce(Tensor, int, ReduceOp) { unsupported(*this, "reduce"); }
Work ProcessGroup::all_to_all(Tensor, Tensor, std::vector<int64_t>, std::vector<int64_t>) {
  unsupported(*this, "all_to_all");
}
std::shared_ptr<ProcessGroup> ProcessGroup::new_group(const std::vector<int>&) { unsupported(*this, "new_group"); }

}  // namespace engine::dist
