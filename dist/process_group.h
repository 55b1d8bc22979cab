// ProcessGroup: a fixed set of processes (ranks 0 .. size-1) that run collectives together.
// Every collective is asynchronous underneath: it returns a Work whose wait() blocks until
// it is done (and rethrows its error). Collectives run in the order they were called, on
// every rank, so calling the same sequence everywhere is what keeps ranks in step.
//
//   Work w = group.all_reduce(grad, ReduceOp::Sum);   // starts now, in the background
//   ...                                               // compute something else meanwhile
//   w.wait();                                         // grad now holds the sum over ranks
//   auto evens = group.new_group({0, 2});             // a subgroup (nullptr on ranks 1, 3)
//
// The free functions in dist.h (dist::all_reduce, ...) use the default group made by
// dist::init_process_group.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace engine::dist {

enum class ReduceOp { Sum, Avg, Min, Max, Product };
const char* reduce_op_name(ReduceOp op);

// The members of a new group, checked (none, a rank outside 0..size-1, or a rank twice is
// an error naming it) and sorted: the new group's rank r is the r-th of them.
std::vector<int> checked_group_ranks(std::vector<int> ranks, int size);

// all_to_all's pieces of `t` ("input" or "output"), in rows along dim 0: the splits given,
// checked (one per rank, none negative, adding up to t's rows), or equal pieces.
std::vector<int64_t> all_to_all_rows(const char* which, std::vector<int64_t> splits, const Tensor& t, int size);

// all_gather's and gather's output list, as PyTorch takes it: `size` tensors of the
// input's shape, dtype and device, which the collective writes into (views of a larger
// tensor too). An empty list is filled with new tensors instead, and this returns false.
// A list of another length, or a tensor that does not fit, is an error naming it.
bool given_outputs(const char* op, const std::vector<Tensor>& outputs, const Tensor& input, int size);

// The handle of a collective in flight.
class Work {
 public:
  // Complete already: what a collective that finished at once returns, and what a
  // communication hook's Future may carry for a result it computed itself. Nothing can
  // be left waiting on a Work made by hand.
  Work();
  // Not complete until the group that runs the collective calls finish() or fail().
  static Work pending();
  // Blocks until the collective finished; throws engine::Error if it failed.
  void wait() const;
  bool is_completed() const;

  // For the group that runs the collective: mark it done, or failed.
  void finish() const;
  void fail(std::exception_ptr error) const;
  // For the group: wait() calls `help` until the work is done or it returns false (it
  // runs the group's next queued collective on the waiting thread), then sleeps.
  void set_helper(std::function<bool()> help) { state_->help = std::move(help); }

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
    std::function<bool()> help;
  };
  std::shared_ptr<State> state_;
};

class ProcessGroup {
 public:
  virtual ~ProcessGroup() = default;
  int rank() const { return rank_; }
  int size() const { return size_; }
  virtual std::string backend() const = 0;
  // The algorithm all_reduce runs (for the CPU backend "ring", "shm" or "hierarchical").
  virtual std::string all_reduce_algorithm() const { return backend(); }
  // "host:port" where this rank accepts its peers' connections, where the backend has one.
  virtual std::string address() const { return ""; }

  // Every rank ends with op over all ranks' `tensor`, in place; identical bits everywhere.
  virtual Work all_reduce(Tensor tensor, ReduceOp op = ReduceOp::Sum) = 0;
  // `root`'s tensor is copied into every rank's tensor.
  virtual Work broadcast(Tensor tensor, int root) = 0;
  // outputs[r] receives rank r's input: written into the tensors given (one per rank, each
  // of the input's shape), or, for an empty list, into new ones (see given_outputs).
  virtual Work all_gather(std::vector<Tensor>* outputs, Tensor input) = 0;
  // The same into one tensor: output holds size() blocks, block r = rank r's input
  // (PyTorch's all_gather_into_tensor; FSDP gathers a unit's parameters this way).
  virtual Work all_gather_into_tensor(Tensor output, Tensor input);
  // input holds size() equal blocks along dim 0; rank r gets op over all ranks of block r.
  virtual Work reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::Sum) = 0;
  // Returns once every rank has called barrier().
  virtual Work barrier() = 0;
  // Point to point: the tensor goes to (comes from) one peer; shapes and dtypes must match.
  virtual Work send(Tensor tensor, int dst) = 0;
  virtual Work recv(Tensor tensor, int src) = 0;

  // Rooted collectives. gather: on dst, outputs[r] receives rank r's input, as all_gather's
  // (elsewhere outputs is left empty, and may be null, as PyTorch's gather_list=None). scatter: rank r's output
  // receives src's inputs[r] (inputs is read on src only). reduce: dst's tensor ends with op over every rank's tensor;
  // the others' are left as they were.
  virtual Work gather(std::vector<Tensor>* outputs, Tensor input, int dst);
  virtual Work scatter(Tensor output, const std::vector<Tensor>& inputs, int src);
  virtual Work reduce(Tensor tensor, int dst, ReduceOp op = ReduceOp::Sum);
  // Every rank sends a piece of its input to every rank (itself too): input is cut along
  // dim 0 into size() pieces, input_splits[r] rows for rank r; output receives the pieces
  // cut for this rank, in rank order, output_splits[r] rows from rank r. Empty splits mean
  // equal pieces. (PyTorch's all_to_all_single.)
  virtual Work all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits = {},
                          std::vector<int64_t> input_splits = {});
  // A group of some of this group's ranks, with its own connections and its own checks. A
  // collective: every rank of this group calls it, with the same list. Ranks are numbered
  // 0.. in ascending order of their rank here; a rank not in the list gets nullptr.
  virtual std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

  // A zeroed float32 buffer that all_reduce can reduce in place, without staging copies,
  // where the backend can share memory between ranks (DDP keeps its buckets in these).
  // A collective: every rank calls it with the same size, in the same order.
  virtual Tensor shared_buffer(int64_t numel) { return zeros({numel}); }

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
};

}  // namespace engine::dist
