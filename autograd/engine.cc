// The backward pass: Variable::backward().
//
// 1. Walk the graph from the output and order every Variable so that each one comes after
//    all the Variables computed from it (a reverse topological order).
// 2. Count, for each Variable, how many edges lead into it from the graph ("pending").
// 3. Visit in that order. A Variable's gradient is complete when it is visited, so its
//    hooks run and its node's backward formula turns it into gradients of the node's
//    inputs, which are summed per input. Each delivered edge decrements the input's
//    pending count; a leaf whose count reaches zero has its full gradient right then: it is
//    added into grad() and its post-accumulate hooks fire, while the rest of the backward
//    pass is still running. That early signal is what lets DDP overlap communication.
//    A leaf with a grad destination, whose only edge comes from this node and whose grad()
//    is empty, has the destination offered to the formula (Needs::into): a gradient
//    computed there becomes grad() as is, so DDP's buckets receive it without a copy.
#include <ostream>
#include <unordered_map>

#include "autograd/variable.h"
#include "tensor/ops.h"

namespace engine::autograd {
namespace {

using Impl = VariableImpl;

// Post-order DFS without recursion (graphs can be thousands of nodes deep), reversed.
std::vector<Impl*> reverse_topological_order(Impl* root) {
  std::vector<Impl*> post;
  std::unordered_map<Impl*, bool> visited;
  std::vector<std::pair<Impl*, size_t>> stack{{root, 0}};
  visited[root] = true;
  while (!stack.empty()) {
    auto& [v, next] = stack.back();
    const auto* inputs = v->grad_fn ? &v->grad_fn->inputs : nullptr;
    if (inputs && next < inputs->size()) {
      Impl* in = (*inputs)[next++].get();
      if (in && !visited[in]) {
        visited[in] = true;
        stack.push_back({in, 0});
      }
      continue;
    }
    post.push_back(v);
    stack.pop_back();
  }
  return {post.rbegin(), post.rend()};
}

void run_hooks(Impl* v, const Tensor& grad) {
  for (auto& [id, hook] : v->hooks) hook(grad);
}

// Whether `grad` is the leaf's grad destination itself (an op computed it there).
bool is_destination(const Impl* leaf, const Tensor& grad) {
  const Tensor& d = leaf->grad_destination;
  return d.defined() && grad.defined() && grad.storage() == d.storage() && grad.offset() == d.offset() &&
         grad.shape() == d.shape() && grad.strides() == d.strides();
}

// A leaf's gradient for this backward is complete: add it into .grad, then tell the hooks.
void finish_leaf(const std::shared_ptr<Impl>& leaf, const Tensor& grad) {
  run_hooks(leaf.get(), grad);
  // grad() can be replaced through mutable_grad(); adding into one of another shape would
  // broadcast or fail far from the cause, and an optimizer reads it beside the data.
  const Tensor& held = leaf->grad;
  ENGINE_REQUIRE(!held.defined() || (held.shape() == leaf->data.shape() && held.dtype() == leaf->data.dtype() &&
                                     held.device() == leaf->data.device()),
                 "[backward] the grad() of a leaf of shape ", shape_str(leaf->data.shape()), " (",
                 dtype_name(leaf->data.dtype()), ") holds a tensor of shape ", shape_str(held.shape()), " (",
                 dtype_name(held.dtype()),
                 "), assigned through mutable_grad(): the "
                 "gradient cannot be added into it. Assign a tensor of the leaf's shape and dtype, or zero_grad()");
  if (!leaf->grad.defined()) {
    // .grad must own its buffer (an optimizer or DDP writes into it). A gradient that is a
    // fresh, dense tensor held nowhere else can be taken as is, and so can one computed
    // into the leaf's grad destination; anything else is copied.
    const bool exclusive = grad.storage().use_count() == 1 && grad.is_contiguous() && grad.offset() == 0 &&
                           size_t(grad.numel()) * dtype_size(grad.dtype()) == grad.storage()->nbytes();
    leaf->grad = exclusive || is_destination(leaf.get(), grad) ? grad : grad.clone();
  } else {
    add_(leaf->grad, grad);
  }
  Variable handle(leaf);
  for (auto& [id, hook] : leaf->post_hooks) hook(handle);
}

thread_local std::vector<std::function<void()>>* g_callbacks = nullptr;  // set while a backward runs

// Holds the callbacks queued during one backward; run() fires them when it ends. If the
// backward throws they are dropped, so none fires during some later, unrelated backward.
struct CallbackScope {
  std::vector<std::function<void()>> callbacks;
  std::vector<std::function<void()>>* outer;
  CallbackScope() : outer(g_callbacks) { g_callbacks = &callbacks; }
  void run() {
    for (size_t i = 0; i < callbacks.size(); ++i) callbacks[i]();  // a callback may queue another
    callbacks.clear();
  }
  ~CallbackScope() { g_callbacks = outer; }
};

}  // namespace

void queue_callback(std::function<void()> fn) {
  ENGINE_REQUIRE(g_callbacks != nullptr, "[queue_callback] can only be called during backward (from a hook)");
  g_callbacks->push_back(std::move(fn));
}

std::vector<std::shared_ptr<VariableImpl>> reachable_leaves(const Variable& root) {
  std::vector<std::shared_ptr<VariableImpl>> out;
  if (!root.defined()) return out;
  std::unordered_map<Impl*, bool> seen;
  std::vector<std::shared_ptr<Impl>> stack{root.impl()};
  seen[root.impl().get()] = true;
  while (!stack.empty()) {
    std::shared_ptr<Impl> v = stack.back();
    stack.pop_back();
    if (!v->grad_fn) {
      if (v->requires_grad) out.push_back(v);
      continue;
    }
    for (auto& in : v->grad_fn->inputs)
      if (in && !seen[in.get()]) seen[in.get()] = true, stack.push_back(in);
  }
  return out;
}

namespace {
// A tensor a node used, written in place between that forward and this backward, would
// give a gradient that mixes old and new values: the node's backward reads what it saved,
// which is that same memory. For a parameter it is an optimizer step or load_state_dict
// before backward(); for an activation or an input, a write through .data(). PyTorch
// refuses both through its version counters; so do we, for every input and output whose
// memory is still alive (PyTorch checks only the tensors an op saved, so it lets through
// a write to a tensor that no op needs; here that is an error too).
void check_unchanged(const Node& node) {
  for (size_t i = 0; i < node.versions.size(); ++i) {
    const std::shared_ptr<Storage> storage = node.versions[i].storage.lock();
    if (!storage || storage->version() == node.versions[i].version) continue;
    const bool output = i == node.inputs.size();
    const VariableImpl* in = output ? nullptr : node.inputs[i].get();
    if (in && !in->grad_fn && in->data.storage() == storage)
      throw Error("[backward] a parameter of shape " + shape_str(in->data.shape()) + " used by '" + node.name +
                  "' was modified in place after the forward that used it (an optimizer step(), load_state_dict or "
                  "copy_ before backward()?): its gradient would mix old and new values. Call backward() before "
                  "changing parameters, or run the forward again");
    throw Error(
        "[backward] " +
        (output ? "the output of '" + node.name + "'" : "input " + std::to_string(i + 1) + " of '" + node.name + "'") +
        " was modified in place (copy_, add_, mul_ or fill_ on its data()) after the forward that made it: "
        "the gradient would be computed from the new values. Change a clone() instead, or run the forward "
        "again");
  }
}
}  // namespace

void Variable::backward(const Tensor& grad_in, bool retain_graph) const {
  CallbackScope callbacks;
  backward_pass(grad_in, retain_graph);
  callbacks.run();
}

void Variable::backward_pass(const Tensor& grad_in, bool retain_graph) const {
  ENGINE_REQUIRE(impl_, "[backward] Variable is undefined");
  ENGINE_REQUIRE(impl_->requires_grad,
                 "[backward] this Variable does not require grad and has no graph; "
                 "did you forget requires_grad=true on a parameter, or run the forward under NoGradGuard?");
  Tensor seed = grad_in;
  if (!seed.defined()) {
    ENGINE_REQUIRE(impl_->data.numel() == 1,
                   "[backward] a gradient can be implied only for a one-element output; "
                   "this one has shape ",
                   shape_str(impl_->data.shape()), ", so pass backward(grad)");
    seed = ones_like(impl_->data);
  }
  ENGINE_REQUIRE(seed.shape() == impl_->data.shape(), "[backward] gradient of shape ", shape_str(seed.shape()),
                 " does not match output of shape ", shape_str(impl_->data.shape()));
  ENGINE_REQUIRE(seed.dtype() == impl_->data.dtype() && seed.device() == impl_->data.device(),
                 "[backward] gradient of shape ", shape_str(seed.shape()), " is ", dtype_name(seed.dtype()), " on ",
                 seed.device().str(), ", the output ", dtype_name(impl_->data.dtype()), " on ",
                 impl_->data.device().str(), "; they must match");

  const std::vector<Impl*> order = reverse_topological_order(impl_.get());
  std::unordered_map<Impl*, int> pending;
  for (Impl* v : order)
    if (v->grad_fn)
      for (auto& in : v->grad_fn->inputs)
        if (in) ++pending[in.get()];

  std::unordered_map<Impl*, Tensor> grads{{impl_.get(), seed}};
  // Gradients are moved, not copied, along the way, so a leaf's total is usually held
  // nowhere else and finish_leaf can keep it as .grad without a copy.
  auto deliver = [&](const std::shared_ptr<Impl>& to, Tensor g) {
    if (g.defined()) {
      auto it = grads.find(to.get());
      if (it == grads.end())
        grads.emplace(to.get(), std::move(g));
      else
        it->second = it->second + g;
    }
    if (--pending[to.get()] == 0 && !to->grad_fn) {
      auto it = grads.find(to.get());
      if (it != grads.end()) {
        const Tensor total = std::move(it->second);
        grads.erase(it);
        finish_leaf(to, total);
      }
    }
  };

  if (!impl_->grad_fn) {  // backward() called on a leaf itself
    finish_leaf(impl_, seed);
    return;
  }
  for (Impl* v : order) {
    if (!v->grad_fn) continue;  // leaves are finished by `deliver`
    Node& node = *v->grad_fn;
    ENGINE_REQUIRE(!node.freed, "[backward] trying to backward through the graph a second time (at node '", node.name,
                   "'); its saved tensors were freed after the first backward. "
                   "Pass retain_graph=true to the first backward() if you need to run it twice.");
    auto found = grads.find(v);
    std::vector<Tensor> in_grads;
    if (found != grads.end()) {
      const Tensor g = found->second;
      run_hooks(v, g);
      if (v->retains_grad) v->grad = v->grad.defined() ? v->grad + g : g.clone();
      Needs needs{std::vector<bool>(node.inputs.size()), std::vector<Tensor>(node.inputs.size())};
      for (size_t i = 0; i < node.inputs.size(); ++i) {
        Impl* in = node.inputs[i].get();
        needs.grad[i] = in != nullptr;
        // A leaf's destination is offered when this node makes the leaf's whole gradient:
        // its only edge in the graph, no gradient delivered to it yet, nothing in .grad.
        if (in && !in->grad_fn && in->grad_destination.defined() && !in->grad.defined() && pending[in] == 1 &&
            !grads.count(in))
          needs.into[i] = in->grad_destination;
      }
      check_unchanged(node);
      in_grads = node.backward(g, needs);
      ENGINE_CHECK(in_grads.size() == node.inputs.size());
      grads.erase(found);  // no longer needed: free it early
    }
    for (size_t i = 0; i < node.inputs.size(); ++i) {
      const std::shared_ptr<Impl>& in = node.inputs[i];
      if (!in) continue;
      Tensor g = i < in_grads.size() ? std::move(in_grads[i]) : Tensor();
      // A formula gives its input's shape at the forward; only set_data() can change it since.
      ENGINE_REQUIRE(!g.defined() || g.shape() == in->data.shape(), "[backward] '", node.name,
                     "' computed a gradient of shape ", shape_str(g.shape()), " for its input ", i + 1,
                     ", whose data now has shape ", shape_str(in->data.shape()),
                     ": set_data() changed its shape after the forward that used it. Run the forward again");
      deliver(in, std::move(g));
    }
    if (!retain_graph) {
      node.backward = nullptr;  // drops the saved tensors
      node.freed = true;
    }
  }
}

}  // namespace engine::autograd
