// Variable: a Tensor that remembers how it was computed, so backward() can find gradients.
//
//   Variable w(randn({3, 2}), /*requires_grad=*/true);   // a leaf: a parameter
//   Variable x(randn({4, 3}));                            // a constant input
//   Variable loss = mean(relu(matmul(x, w)));             // the graph is recorded here
//   loss.backward();                                      // d loss / d w lands in w.grad()
//   w.register_post_accumulate_grad_hook([](Variable& p) { /* p.grad() is complete */ });
//
// Ops on Variables (ops.h in this folder) compute with the tensor ops and, when any input
// requires grad and grad mode is on, record a Node holding the backward formula. A plain
// Tensor converts to a constant Variable, so `x * mask` works for a Tensor mask.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

namespace engine::autograd {

struct Node;
struct VariableImpl;
class Variable;

using TensorHook = std::function<void(const Tensor& grad)>;
using PostAccumulateHook = std::function<void(Variable& leaf)>;

class Variable {
 public:
  Variable() = default;
  // Wraps `data` (shared, not copied). Only float32 tensors can require grad.
  Variable(Tensor data, bool requires_grad = false);  // NOLINT: implicit on purpose

  bool defined() const { return impl_ != nullptr; }
  const Tensor& data() const;
  // Replaces the values without touching the graph (what an optimizer step does).
  void set_data(const Tensor& data);
  const Shape& shape() const { return data().shape(); }
  int64_t dim() const { return data().dim(); }
  int64_t size(int64_t d) const { return data().size(d); }
  int64_t numel() const { return data().numel(); }
  double item() const { return data().item(); }

  // ---- gradients
  bool requires_grad() const;
  Variable& set_requires_grad(bool requires_grad);  // leaves only
  bool is_leaf() const;                             // made by the user, not by an op
  // The accumulated gradient: defined for leaves after a backward reached them, and for
  // non-leaves that called retain_grad().
  const Tensor& grad() const;
  Tensor& mutable_grad();
  void set_grad(const Tensor& grad);
  void zero_grad();  // drops the gradient (like PyTorch's set_to_none)
  void retain_grad();
  // Leaves only: a tensor of this leaf's shape (contiguous, float32) where a backward that
  // finds grad() empty may compute the gradient directly, which then becomes grad() as is.
  // It is offered to the op that makes the gradient when that op is the leaf's only user
  // in the graph; ops that can (linear's weight gradient) write there, others ignore it.
  // DistributedDataParallel points it into its bucket: the gradient is born where it is
  // reduced, with no copy. An undefined tensor removes it.
  void set_grad_destination(const Tensor& destination);
  // The op that produced this Variable ("matmul", ...), or "" for a leaf.
  std::string grad_fn_name() const;
  // Set by a wrapper that trains this parameter through other Variables (FSDP trains its
  // flat shards): what to optimize instead. An optimizer given this Variable says so.
  void set_trained_through(const std::string& what);
  const std::string& trained_through() const;

  // Runs backpropagation from this Variable. Without `grad`, it must hold one element and
  // the seed gradient is 1. Gradients of leaves add into their grad(). The graph's saved
  // tensors are freed afterwards unless retain_graph is true; a second backward through a
  // freed graph throws an error saying so.
  void backward(const Tensor& grad = Tensor(), bool retain_graph = false) const;

  // A new leaf sharing this Variable's data, cut off from the graph.
  Variable detach() const;

  // Called once per backward with this Variable's total gradient, as soon as it is
  // complete (for a leaf: just before it is added into grad()). Returns an id for removal.
  int register_hook(TensorHook hook);
  // Leaves only: called once per backward right after the gradient has been fully added
  // into grad(). DistributedDataParallel starts its bucket all-reduces from here.
  int register_post_accumulate_grad_hook(PostAccumulateHook hook);
  void remove_hook(int id);

  // Internal: the shared state, for the autograd engine and for ops.
  void backward_pass(const Tensor& grad, bool retain_graph) const;
  const std::shared_ptr<VariableImpl>& impl() const { return impl_; }
  explicit Variable(std::shared_ptr<VariableImpl> impl) : impl_(std::move(impl)) {}

 private:
  std::shared_ptr<VariableImpl> impl_;
};

// Records nothing while alive: for evaluation and for optimizer updates.
//   { NoGradGuard no_grad; auto y = model(x); }
class NoGradGuard {
 public:
  NoGradGuard();
  ~NoGradGuard();
  NoGradGuard(const NoGradGuard&) = delete;
  NoGradGuard& operator=(const NoGradGuard&) = delete;

 private:
  bool previous_;
};
bool is_grad_enabled();

// Runs `fn` once when the backward pass currently in progress on this thread finishes
// (after every gradient has been delivered and every hook has run). Called from a hook;
// DistributedDataParallel uses it to wait for its all-reduces before backward() returns.
void queue_callback(std::function<void()> fn);

// The leaves that requires-grad and are reachable from `root` through its graph: the
// parameters a loss depends on. DDP's find_unused_parameters uses it after forward.
std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const Variable& root);

std::ostream& operator<<(std::ostream& out, const Variable& v);

// ---- the graph, for ops that record into it (see ops_math.cc for how ops use `record`).

// What a node's backward is asked for: needs[i] says whether input i wants a gradient (an
// undefined Tensor is returned where it does not); into[i], when defined, is where that
// gradient may be computed (a leaf's grad destination): an op that can write there returns
// that tensor, and the engine keeps it as the leaf's grad() without a copy.
struct Needs {
  std::vector<bool> grad;
  std::vector<Tensor> into;
  bool operator[](size_t i) const { return grad[i]; }
  size_t size() const { return grad.size(); }
};

// Gradients of one node's inputs given its output's gradient.
using BackwardFn = std::function<std::vector<Tensor>(const Tensor& grad_out, const Needs& needs)>;

// The memory of a tensor a node used (an input, or its output) and that memory's version
// then (see Storage::version). Weak: a node must not keep an activation alive that its
// backward does not need; memory that is gone can no longer be written.
struct SeenVersion {
  std::weak_ptr<Storage> storage;
  uint64_t version = 0;
};

struct Node {
  // Releases a chain of nodes this one alone keeps alive one by one, not recursively: a
  // graph a million ops deep would otherwise overflow the stack when it is dropped.
  ~Node();
  std::string name;
  std::vector<std::shared_ptr<VariableImpl>> inputs;  // null where the input needs no grad
  std::vector<SeenVersion> versions;                  // per input, then the output's
  BackwardFn backward;                                // emptied when the graph is freed
  bool freed = false;
};

struct VariableImpl {
  Tensor data;
  Tensor grad;
  Tensor grad_destination;  // see Variable::set_grad_destination
  bool requires_grad = false;
  bool retains_grad = false;
  std::shared_ptr<Node> grad_fn;  // null for leaves
  std::vector<std::pair<int, TensorHook>> hooks;
  std::vector<std::pair<int, PostAccumulateHook>> post_hooks;
  std::string trained_through;  // see Variable::set_trained_through
};

// Wraps an op's output: when grad mode is on and some input requires grad, the output
// gets a Node named `name` with `backward`; otherwise it is a plain constant.
Variable record(const char* name, Tensor output, const std::vector<Variable>& inputs, BackwardFn backward);

}  // namespace engine::autograd
