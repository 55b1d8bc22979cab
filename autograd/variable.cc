#include "autograd/variable.h"

#include <atomic>
#include <ostream>

namespace engine::autograd {

namespace {
thread_local bool grad_enabled = true;
std::atomic<int> next_hook_id{1};
}  // namespace

bool is_grad_enabled() { return grad_enabled; }
NoGradGuard::NoGradGuard() : previous_(grad_enabled) { grad_enabled = false; }
NoGradGuard::~NoGradGuard() { grad_enabled = previous_; }

Variable::Variable(Tensor data, bool requires_grad) : impl_(std::make_shared<VariableImpl>()) {
  ENGINE_REQUIRE(data.defined(), "[Variable] cannot wrap an undefined tensor");
  impl_->data = std::move(data);
  set_requires_grad(requires_grad);
}

const Tensor& Variable::data() const {
  ENGINE_REQUIRE(impl_, "[Variable] is undefined");
  return impl_->data;
}

void Variable::set_data(const Tensor& data) {
  ENGINE_REQUIRE(impl_, "[set_data] Variable is undefined");
  impl_->data = data;
}

bool Variable::requires_grad() const { return impl_ && impl_->requires_grad; }

Variable& Variable::set_requires_grad(bool requires_grad) {
  ENGINE_REQUIRE(impl_, "[set_requires_grad] Variable is undefined");
  ENGINE_REQUIRE(!impl_->grad_fn, "[set_requires_grad] can only be set on a leaf; this Variable was made by ",
                 impl_->grad_fn->name, " (use detach() for a new leaf)");
  ENGINE_REQUIRE(!requires_grad || impl_->data.dtype() == DType::Float32,
                 "[set_requires_grad] only float32 tensors can require gradients, got ",
                 dtype_name(impl_->data.dtype()));
  impl_->requires_grad = requires_grad;
  return *this;
}

bool Variable::is_leaf() const { return impl_ && !impl_->grad_fn; }

const Tensor& Variable::grad() const {
  ENGINE_REQUIRE(impl_, "[grad] Variable is undefined");
  return impl_->grad;
}

Tensor& Variable::mutable_grad() {
  ENGINE_REQUIRE(impl_, "[grad] Variable is undefined");
  return impl_->grad;
}

void Variable::set_grad(const Tensor& grad) {
  ENGINE_REQUIRE(impl_, "[set_grad] Variable is undefined");
  ENGINE_REQUIRE(!grad.defined() || grad.shape() == impl_->data.shape(), "[set_grad] gradient of shape ",
                 shape_str(grad.shape()), " does not match data of shape ", shape_str(impl_->data.shape()));
  // As PyTorch's check on assigning .grad: an optimizer reads the two side by side.
  ENGINE_REQUIRE(!grad.defined() || (grad.dtype() == impl_->data.dtype() && grad.device() == impl_->data.device()),
                 "[set_grad] gradient of shape ", shape_str(grad.shape()), " is ", dtype_name(grad.dtype()), " on ",
                 grad.device().str(), ", the data ", dtype_name(impl_->data.dtype()), " on ",
                 impl_->data.device().str(), "; they must match");
  impl_->grad = grad;
}

void Variable::set_grad_destination(const Tensor& destination) {
  ENGINE_REQUIRE(impl_, "[set_grad_destination] Variable is undefined");
  if (!destination.defined()) {  // removing one works on any Variable (its owner may have frozen it since)
    impl_->grad_destination = Tensor();
    return;
  }
  ENGINE_REQUIRE(requires_grad() && is_leaf(), "[set_grad_destination] needs a leaf that requires grad");
  ENGINE_REQUIRE(destination.shape() == impl_->data.shape() && destination.dtype() == DType::Float32 &&
                     destination.is_contiguous() && destination.device() == impl_->data.device(),
                 "[set_grad_destination] the destination must be a contiguous float32 tensor of the leaf's shape ",
                 shape_str(impl_->data.shape()), " on ", impl_->data.device().str(), ", got ",
                 shape_str(destination.shape()));
  impl_->grad_destination = destination;
}

void Variable::zero_grad() {
  if (impl_) impl_->grad = Tensor();
}

void Variable::retain_grad() {
  ENGINE_REQUIRE(requires_grad(), "[retain_grad] this Variable does not require grad");
  impl_->retains_grad = true;
}

void Variable::set_trained_through(const std::string& what) {
  ENGINE_REQUIRE(impl_, "[set_trained_through] Variable is undefined");
  impl_->trained_through = what;
}

const std::string& Variable::trained_through() const {
  static const std::string none;
  return impl_ ? impl_->trained_through : none;
}

std::string Variable::grad_fn_name() const { return impl_ && impl_->grad_fn ? impl_->grad_fn->name : ""; }

Variable Variable::detach() const { return Variable(data(), false); }

int Variable::register_hook(TensorHook hook) {
  ENGINE_REQUIRE(requires_grad(), "[register_hook] this Variable does not require grad, so no gradient will reach it");
  const int id = next_hook_id++;
  impl_->hooks.emplace_back(id, std::move(hook));
  return id;
}

int Variable::register_post_accumulate_grad_hook(PostAccumulateHook hook) {
  ENGINE_REQUIRE(requires_grad() && is_leaf(),
                 "[register_post_accumulate_grad_hook] needs a leaf that requires grad (a parameter)");
  const int id = next_hook_id++;
  impl_->post_hooks.emplace_back(id, std::move(hook));
  return id;
}

void Variable::remove_hook(int id) {
  if (!impl_) return;
  auto drop = [id](auto& list) {
    for (auto it = list.begin(); it != list.end(); ++it)
      if (it->first == id) {
        list.erase(it);
        return;
      }
  };
  drop(impl_->hooks);
  drop(impl_->post_hooks);
}

std::ostream& operator<<(std::ostream& out, const Variable& v) {
  if (!v.defined()) return out << "Variable(undefined)";
  out << v.data();
  if (!v.grad_fn_name().empty())
    out << " grad_fn=" << v.grad_fn_name();
  else if (v.requires_grad())
    out << " requires_grad=true";
  return out;
}

Variable record(const char* name, Tensor output, const std::vector<Variable>& inputs, BackwardFn backward) {
  bool any = false;
  for (const Variable& v : inputs) any = any || v.requires_grad();
  if (!any || !grad_enabled) return Variable(std::move(output));
  auto node = std::make_shared<Node>();
  node->name = name;
  auto seen = [](const Tensor& t) {
    return t.defined() && t.storage() ? SeenVersion{t.storage(), t.storage()->version()} : SeenVersion{};
  };
  for (const Variable& v : inputs) {
    node->inputs.push_back(v.requires_grad() ? v.impl() : nullptr);
    node->versions.push_back(v.defined() ? seen(v.data()) : SeenVersion{});
  }
  node->versions.push_back(seen(output));
  node->backward = std::move(backward);
  auto impl = std::make_shared<VariableImpl>();
  impl->data = std::move(output);
  impl->requires_grad = true;
  impl->grad_fn = std::move(node);
  return Variable(std::move(impl));
}

// Dropping the last Variable of a chain y = f(f(...f(w))) releases its node, whose inputs
// release their nodes, and so on: one nested destructor per op. Instead, each input that
// this node alone owns hands over its node (if it alone owns that) to a local list, and the
// list is emptied in a loop; each node released there finds its own inputs already taken.
Node::~Node() {
  std::vector<std::shared_ptr<Node>> pending;
  auto take_inputs = [&pending](Node& node) {
    for (std::shared_ptr<VariableImpl>& in : node.inputs)
      if (in && in.use_count() == 1 && in->grad_fn && in->grad_fn.use_count() == 1)
        pending.push_back(std::move(in->grad_fn));
    node.inputs.clear();
  };
  take_inputs(*this);
  while (!pending.empty()) {
    std::shared_ptr<Node> node = std::move(pending.back());
    pending.pop_back();
    take_inputs(*node);
  }  // `node` is destroyed here with no inputs left: no recursion
}

}  // namespace engine::autograd
