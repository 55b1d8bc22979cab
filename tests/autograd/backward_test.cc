// The backward pass itself: accumulation, hooks, retain_graph, no-grad, detach, errors.
#include <functional>
#include <map>
#include <string>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::autograd;
using V = std::vector<float>;

TEST_CASE("a hand-computed gradient") {
  // L = sum(w * x + w^2) with w = [1, 2], x = [3, 4]:  dL/dw = x + 2w = [5, 8]
  Variable w(tensor({1, 2}), true);
  Variable x(tensor({3, 4}));
  sum(w * x + w * w).backward();
  REQUIRE(w.grad().to_vector<float>() == V{5, 8});
  REQUIRE_FALSE(x.grad().defined());  // constants get no gradient
}

TEST_CASE("gradients accumulate across backward calls until zero_grad") {
  Variable w(tensor({1, 2}), true);
  sum(w * 3.0).backward();
  sum(w * 3.0).backward();
  REQUIRE(w.grad().to_vector<float>() == V{6, 6});
  w.zero_grad();
  REQUIRE_FALSE(w.grad().defined());
  sum(w).backward();
  REQUIRE(w.grad().to_vector<float>() == V{1, 1});
}

TEST_CASE("a leaf used many times gets the sum of all paths") {
  Variable a(tensor({2}), true);
  Variable b = a * a;      // 2a
  Variable c = b * a + a;  // d/da (a^3 + a) = 3a^2 + 1 = 13
  c.backward(ones({1}));
  REQUIRE(a.grad().item() == 13);
}

TEST_CASE("backward with an explicit gradient, and its errors") {
  Variable w(tensor({1, 2, 3}), true);
  Variable y = w * 2.0;
  y.backward(tensor({1, 0, -1}));
  REQUIRE(w.grad().to_vector<float>() == V{2, 0, -2});
  Variable y2 = w * 2.0;
  REQUIRE_THROWS_WITH(y2.backward(),
                      Catch::Contains("[backward] a gradient can be implied only for a one-element output"));
  REQUIRE_THROWS_WITH(y2.backward(ones({2})),
                      Catch::Contains("[backward] gradient of shape (2,) does not match output of shape (3,)"));
  REQUIRE_THROWS_WITH(y2.backward(ones({3}).to(DType::Int64)),
                      Catch::Contains("[backward] gradient of shape (3,) is int64 on cpu, the output float32 on cpu"));
  Variable c(tensor({1}));
  REQUIRE_THROWS_WITH(c.backward(), Catch::Contains("does not require grad"));
}

TEST_CASE("a leaf whose shape changed after the forward, or whose grad() was replaced, is named in backward") {
  // set_data() of another shape between forward and backward: the formula's gradient has
  // the old shape. PyTorch refuses it too ("invalid gradient ... expected shape").
  Variable w(ones({3}), true);
  Variable y = sum(w * w);
  w.set_data(ones({4}));
  REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("[backward] 'mul' computed a gradient of shape (3,) for its input "
                                                    "1, whose data now has shape (4,): set_data() changed its shape"));
  // grad() assigned through mutable_grad() with another shape: not broadcast into.
  Variable v(ones({3}), true);
  sum(v * 2.0).backward();
  v.mutable_grad() = ones({1});
  REQUIRE_THROWS_WITH(sum(v * 2.0).backward(),
                      Catch::Contains("the grad() of a leaf of shape (3,) (float32) holds a tensor of shape (1,)"));
  v.mutable_grad() = ones({3}).to(DType::Int64);
  REQUIRE_THROWS_WITH(sum(v * 2.0).backward(), Catch::Contains("holds a tensor of shape (3,) (int64)"));
  v.zero_grad();
  sum(v * 2.0).backward();
  REQUIRE(v.grad().to_vector<float>() == V{2, 2, 2});
}

TEST_CASE("backward twice through a freed graph is a clear error; retain_graph allows it") {
  Variable w(tensor({1, 2}), true);
  Variable loss = sum(exp(w));
  loss.backward();
  REQUIRE_THROWS_WITH(loss.backward(), Catch::Contains("backward through the graph a second time") &&
                                           Catch::Contains("retain_graph=true"));
  w.zero_grad();
  Variable loss2 = sum(w * w);
  loss2.backward(Tensor(), /*retain_graph=*/true);
  loss2.backward();
  REQUIRE(w.grad().to_vector<float>() == V{4, 8});  // 2 * 2w
}

TEST_CASE("NoGradGuard records nothing; detach cuts the graph") {
  Variable w(tensor({1, 2}), true);
  {
    NoGradGuard no_grad;
    Variable y = w * 2.0;
    REQUIRE_FALSE(y.requires_grad());
    REQUIRE(is_grad_enabled() == false);
  }
  REQUIRE(is_grad_enabled());
  Variable y = w * 2.0;
  REQUIRE(y.requires_grad());
  REQUIRE(y.grad_fn_name() == "mul");
  REQUIRE_FALSE(y.is_leaf());
  Variable d = y.detach();
  REQUIRE(d.is_leaf());
  REQUIRE_FALSE(d.requires_grad());
  REQUIRE(d.data().storage() == y.data().storage());  // same values, no copy
  REQUIRE_THROWS_WITH(y.set_requires_grad(false), Catch::Contains("[set_requires_grad] can only be set on a leaf"));
  REQUIRE_THROWS_WITH(Variable(zeros({2}, DType::Int64), true),
                      Catch::Contains("only float32 tensors can require gradients"));
}

TEST_CASE("post-accumulate hooks fire exactly once per leaf per backward, after accumulation") {
  // Two layers; w1 is used twice (shared weights), w2 once, b not at all.
  Variable w1(randn({3, 3}), true), w2(randn({3, 2}), true), b(zeros({2}), true);
  const Tensor x = randn({4, 3});
  std::map<std::string, int> fired;
  std::map<std::string, std::vector<float>> seen;
  auto watch = [&](Variable& p, const std::string& name) {
    p.register_post_accumulate_grad_hook([&, name](Variable& leaf) {
      ++fired[name];
      seen[name] = leaf.grad().to_vector<float>();  // the gradient as the hook sees it
    });
  };
  watch(w1, "w1"), watch(w2, "w2"), watch(b, "b");
  auto loss = [&] { return sum(matmul(tanh(matmul(tanh(matmul(Variable(x), w1)), w1)), w2)); };
  loss().backward();
  REQUIRE(fired["w1"] == 1);
  REQUIRE(fired["w2"] == 1);
  REQUIRE(fired.count("b") == 0);  // no gradient reached b: its hook must not fire
  // The hook saw the complete gradient: the same as .grad after backward returned.
  REQUIRE(seen["w1"] == w1.grad().to_vector<float>());
  REQUIRE(seen["w2"] == w2.grad().to_vector<float>());
  // A second backward accumulates, and the hook sees the accumulated value.
  const std::vector<float> first = w1.grad().to_vector<float>();
  loss().backward();
  REQUIRE(fired["w1"] == 2);
  const std::vector<float> second = seen["w1"];
  for (size_t i = 0; i < first.size(); ++i) REQUIRE(second[i] == Approx(2 * first[i]));
}

TEST_CASE("leaf hooks fire during backward, before earlier layers are processed") {
  // A chain x -> w1 -> w2 -> w3: w3's gradient is ready first, w1's last. DDP relies on
  // this order to start communication while backward is still running.
  Variable w1(randn({4, 4}), true), w2(randn({4, 4}), true), w3(randn({4, 4}), true);
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook([&](Variable&) { order.push_back("w1"); });
  w2.register_post_accumulate_grad_hook([&](Variable&) { order.push_back("w2"); });
  w3.register_post_accumulate_grad_hook([&](Variable&) { order.push_back("w3"); });
  Variable h = matmul(Variable(randn({2, 4})), w1);
  h = matmul(relu(h), w2);
  h = matmul(relu(h), w3);
  sum(h).backward();
  REQUIRE(order == std::vector<std::string>{"w3", "w2", "w1"});
}

TEST_CASE("tensor hooks on leaves and non-leaves; remove_hook; retain_grad") {
  Variable w(tensor({1, 2}), true);
  Variable h = w * 3.0;
  h.retain_grad();
  std::vector<float> h_grad, w_grad;
  h.register_hook([&](const Tensor& g) { h_grad = g.to_vector<float>(); });
  const int id = w.register_hook([&](const Tensor& g) { w_grad = g.to_vector<float>(); });
  sum(h * h).backward();  // d/dh = 2h = [6, 12]; d/dw = 3 * 2h = [18, 36]
  REQUIRE(h_grad == V{6, 12});
  REQUIRE(h.grad().to_vector<float>() == V{6, 12});
  REQUIRE(w_grad == V{18, 36});
  w.remove_hook(id);
  w_grad.clear();
  sum(w).backward();
  REQUIRE(w_grad.empty());
  REQUIRE_THROWS_WITH(Variable(tensor({1})).register_hook([](const Tensor&) {}), Catch::Contains("[register_hook]"));
  REQUIRE_THROWS_WITH(h.register_post_accumulate_grad_hook([](Variable&) {}),
                      Catch::Contains("needs a leaf that requires grad"));
}

TEST_CASE("a deep graph does not overflow the stack") {
  Variable w(tensor({1}), true);
  Variable y = w;
  for (int i = 0; i < 20000; ++i) y = y * 1.0;
  sum(y).backward();
  REQUIRE(w.grad().item() == 1);
}

TEST_CASE(".grad never shares memory with another tensor or another leaf") {
  // add's backward hands the same gradient tensor to both inputs; each leaf must get its own.
  Variable a(tensor({1, 2}), true), b(tensor({3, 4}), true);
  sum((a + b) * 2.0).backward();
  REQUIRE(a.grad().storage() != b.grad().storage());
  a.mutable_grad().fill_(0);
  REQUIRE(b.grad().to_vector<float>() == V{2, 2});
  // A gradient the caller passed in is copied, not adopted.
  Variable w(tensor({1, 2}), true);
  Tensor seed = tensor({5, 6});
  w.backward(seed);
  REQUIRE(w.grad().storage() != seed.storage());
  // A hook that keeps the gradient it saw does not see it change when .grad is updated.
  Variable p(tensor({1}), true);
  Tensor kept;
  p.register_hook([&](const Tensor& g) { kept = g; });
  sum(p * 3.0).backward();
  sum(p * 3.0).backward();
  REQUIRE(kept.item() == 3);
  REQUIRE(p.grad().item() == 6);
}

TEST_CASE("queue_callback runs once, after every hook of the backward") {
  Variable w1(tensor({1}), true), w2(tensor({2}), true);
  std::vector<std::string> order;
  w1.register_post_accumulate_grad_hook([&](Variable&) {
    order.push_back("w1");
    autograd::queue_callback([&] { order.push_back("end"); });
  });
  w2.register_post_accumulate_grad_hook([&](Variable&) { order.push_back("w2"); });
  sum(w1 * w2 * w2).backward();
  REQUIRE(order.size() == 3);
  REQUIRE(order.back() == "end");
  sum(w2 * 2.0).backward();  // the callback does not fire again
  REQUIRE(order.back() == "w2");
  REQUIRE_THROWS_WITH(autograd::queue_callback([] {}), Catch::Contains("only be called during backward"));
}

TEST_CASE("reachable_leaves finds the parameters a result depends on") {
  Variable a(tensor({1}), true), b(tensor({2}), true), unused(tensor({3}), true);
  Variable y = a * b + a;
  const auto leaves = autograd::reachable_leaves(y);
  REQUIRE(leaves.size() == 2);
  for (auto& l : leaves) REQUIRE(l.get() != unused.impl().get());
}

namespace {
// y = x * w, elementwise, whose backward computes w's gradient into the destination the
// engine offers, when it offers one (as linear does for its weight).
Variable scale(const Variable& x, const Variable& w) {
  return record("scale", x.data() * w.data(), {x, w}, [xd = x.data(), wd = w.data()](const Tensor& g, const Needs& n) {
    std::vector<Tensor> grads(2);
    if (n[0]) grads[0] = g * wd;
    if (n[1]) grads[1] = n.into[1].defined() ? Tensor(n.into[1]).copy_(g * xd) : g * xd;
    return grads;
  });
}
}  // namespace

TEST_CASE("a grad destination is offered when one op makes the leaf's whole gradient, and only then") {
  Variable x(tensor({1, 2}));
  Variable w(tensor({3, 4}), true);
  Tensor dest = zeros({2});
  w.set_grad_destination(dest);
  sum(scale(x, w)).backward();  // the only use of w, .grad empty: born in dest, kept as is
  REQUIRE(w.grad().storage() == dest.storage());
  REQUIRE(dest.to_vector<float>() == V{1, 2});
  sum(scale(x, w)).backward();  // .grad defined: accumulates there (dest is .grad itself now)
  REQUIRE(w.grad().to_vector<float>() == V{2, 4});

  dest.fill_(-1);
  w.zero_grad();
  sum(scale(x, w) + scale(x, w)).backward();  // two uses: their sum cannot be born in one op
  REQUIRE(w.grad().to_vector<float>() == V{2, 4});
  REQUIRE(w.grad().storage() != dest.storage());
  REQUIRE(dest.to_vector<float>() == V{-1, -1});  // untouched

  w.zero_grad();
  w.set_grad_destination(Tensor());  // removed: a fresh tensor again
  sum(scale(x, w)).backward();
  REQUIRE(w.grad().storage() != dest.storage());

  REQUIRE_THROWS_WITH(w.set_grad_destination(zeros({3})), Catch::Contains("of the leaf's shape"));
  REQUIRE_THROWS_WITH(w.set_grad_destination(zeros({2, 2}).select(1, 0)), Catch::Contains("contiguous"));
  REQUIRE_THROWS_WITH(scale(x, w).set_grad_destination(zeros({2})), Catch::Contains("needs a leaf"));
}

TEST_CASE("a graph 300,000 ops deep runs backward and is dropped without overflowing the stack") {
  // Released recursively (node -> input -> its node -> ...) this chain overflowed an 8 MiB
  // stack at about 150,000 ops; backward's traversal was already iterative.
  Variable w(tensor({1}), true);
  {
    Variable y = w;
    for (int i = 0; i < 300000; ++i) y = neg(y);
    y.backward();
  }
  REQUIRE(w.grad().to_vector<float>() == V{1});  // (-1)^300000
  {
    Variable y = w;
    for (int i = 0; i < 300000; ++i) y = y * w;  // never run backward: the graph keeps its saved tensors
  }
  SUCCEED("both graphs released");
}

TEST_CASE("set_grad takes a gradient of the data's shape, dtype and device only, as PyTorch's .grad") {
  Variable w(tensor({3, 4}), true);
  REQUIRE_THROWS_WITH(w.set_grad(zeros({3})),
                      Catch::Contains("gradient of shape (3,) does not match data of shape (2,)"));
  REQUIRE_THROWS_WITH(w.set_grad(zeros({2}, DType::BFloat16)),
                      Catch::Contains("[set_grad] gradient of shape (2,) is bfloat16 on cpu, the data float32 on cpu"));
  REQUIRE_FALSE(w.grad().defined());  // nothing was kept
  w.set_grad(ones({2}));
  REQUIRE(w.grad().to_vector<float>() == V{1, 1});
  w.set_grad(Tensor());  // an undefined gradient clears it
  REQUIRE_FALSE(w.grad().defined());
}

TEST_CASE("a parameter written in place between forward and backward is refused, as PyTorch's version counter") {
  // y = sum(w * x): its backward reads x for dw and w for dx. Writing w after the forward
  // would mix values; each in-place write of the tensor API counts.
  const std::vector<std::pair<const char*, std::function<void(Tensor&)>>> writes = {
      {"copy_",
       [](Tensor& t) {
         t.copy_(tensor({5, 6}));
       }},
      {"fill_", [](Tensor& t) { t.fill_(0); }},
      {"add_",
       [](Tensor& t) {
         add_(t, tensor({1, 1}));
       }},
      {"mul_", [](Tensor& t) { mul_(t, 2); }},
      {"a view's copy_", [](Tensor& t) { t.narrow(0, 1, 1).copy_(tensor({9})); }},
  };
  for (const auto& [name, write] : writes) {
    INFO(name);
    Variable w(tensor({1, 2}), true), x(tensor({3, 4}), true);
    Variable y = sum(w * x);
    Tensor data = w.data();
    write(data);
    REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("[backward] a parameter of shape (2,) used by 'mul' was modified "
                                                      "in place after the forward that used it"));
    // A forward after the write is a new graph: nothing to refuse.
    sum(w * x).backward();
    REQUIRE(w.grad().to_vector<float>() == V{3, 4});
  }
  // Giving a parameter new data (set_data) leaves the graph's tensors as they were: allowed.
  Variable w(tensor({1, 2}), true);
  Variable y = sum(w * w);
  w.set_data(tensor({7, 7}));
  y.backward();
  REQUIRE(w.grad().to_vector<float>() == V{2, 4});
}

TEST_CASE("any tensor a node used, written in place before backward, is refused: inputs, activations, outputs") {
  // An input that needs no gradient: mul saved x to make w's gradient.
  {
    Variable w(tensor({1, 2}), true), x(tensor({3, 4}));
    Variable y = sum(w * x);
    Tensor batch = x.data();
    mul_(batch, 2);  // a batch changed in place after the forward
    REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("[backward] input 2 of 'mul' was modified in place") &&
                                          Catch::Contains("after the forward that made it"));
  }
  // An activation: exp's input h, written through its data().
  {
    Variable w(tensor({1, 2}), true);
    Variable h = w * 3.0;
    Variable y = sum(exp(h));
    Tensor(h.data()).fill_(0);
    REQUIRE_THROWS_WITH(y.backward(), Catch::Contains("input 1 of 'exp' was modified in place"));
  }
  // An output exp saved (its gradient is exp(w) itself), the root of the backward.
  {
    Variable w(tensor({1, 2}), true);
    Variable e = exp(w);
    Tensor out = e.data();
    mul_(out, 2);
    REQUIRE_THROWS_WITH(e.backward(ones({2})), Catch::Contains("the output of 'exp' was modified in place"));
  }
  // Unchanged, the same graphs run; and a write after backward() concerns no graph.
  Variable w(tensor({1, 2}), true), x(tensor({3, 4}));
  Variable y = sum(w * x);
  y.backward();
  Tensor batch = x.data();
  mul_(batch, 2);
  REQUIRE(w.grad().to_vector<float>() == V{3, 4});
}

TEST_CASE("a node does not keep alive the memory of an input its backward does not need") {
  Variable w(tensor({1, 2}), true);
  std::weak_ptr<Storage> memory;
  Variable y;
  {
    Variable x(tensor({3, 4}));
    memory = x.data().storage();
    y = sum(w + x);  // add's backward needs only shapes
  }
  REQUIRE(memory.expired());
  y.backward();
  REQUIRE(w.grad().to_vector<float>() == V{1, 1});
}
