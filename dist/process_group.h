// ProcessGroup: a fixed set of processes (ranks 0 .. size-1) that run collectives together.
// Every collective is asynchronous underneath: it returns a Work whose wait() blocks until
// it is done (and rethrows its error). Collectives run in the order they were called, on
// every rank, so calling the same sequence everywhere is what keeps ranks in step.
//
//   Work w = group.all_reduce(grad, ReduceOp::Sum);   // starts now, in the background
//   ...                                               // compute something else meanwhile
//   w.wait();                                         // grad now holds the sum over ranks
//
// The free functions in dist.h (dist::all_reduce, ...) use the default group made by
// dist::init_process_group.
#pragma once

#include <condition_variable>
#include <exception>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace engine::dist {

enum class ReduceOp { Sum, Avg, Min, Max, Product };
const char* reduce_op_name(ReduceOp op);

// The handle of a collective in flight.
class Work {
 public:
  Work();
  // Blocks until the collective finished; throws engine::Error if it failed.
  void wait() const;
  bool is_completed() const;

  // For the group that runs the collective: mark it done, or failed.
  void finish() const;
  void fail(std::exception_ptr error) const;

 private:
  struct State {
    std::mutex mu;
    std::condition_variable cv;
    bool done = false;
    std::exception_ptr error;
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
  // outputs[r] receives rank r's input (outputs are allocated to the input's shape).
  virtual Work all_gather(std::vector<Tensor>* outputs, Tensor input) = 0;
  // input holds size() equal blocks along dim 0; rank r gets op over all ranks of block r.
  virtual Work reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::Sum) = 0;
  // Returns once every rank has called barrier().
  virtual Work barrier() = 0;
  // Point to point: the tensor goes to (comes from) one peer; shapes and dtypes must match.
  virtual Work send(Tensor tensor, int dst) = 0;
  virtual Work recv(Tensor tensor, int src) = 0;

  // A zeroed float32 buffer that all_reduce can reduce in place, without staging copies,
  // where the backend can share memory between ranks (DDP keeps its buckets in these).
  // A collective: every rank calls it with the same size, in the same order.
  virtual Tensor shared_buffer(int64_t numel) { return zeros({numel}); }

 protected:
  ProcessGroup(int rank, int size) : rank_(rank), size_(size) {}
  int rank_, size_;
};

}  // namespace engine::dist
