// Module bookkeeping: names in registration order, state_dict round trips, strict loading,
// train/eval, zero_grad; SGD against hand-computed steps; a small model that learns.
#include "nn/batchnorm.h"
#include "nn/layers.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/cuda/runtime.h"
#include "tests/testing/gradcheck.h"

using namespace engine;
using namespace engine::nn;
using V = std::vector<float>;

namespace {
std::shared_ptr<Sequential> mlp(Generator* g) {
  return std::make_shared<Sequential>(std::vector<ModulePtr>{
      std::make_shared<Linear>(4, 8, true, g), std::make_shared<ReLU>(), std::make_shared<Linear>(8, 3, true, g)});
}
}  // namespace

TEST_CASE("parameters are named with PyTorch's dotted names, in registration order") {
  Generator g(0);
  auto model = mlp(&g);
  std::vector<std::string> names;
  for (auto& [name, p] : model->named_parameters()) names.push_back(name);
  REQUIRE(names == std::vector<std::string>{"0.weight", "0.bias", "2.weight", "2.bias"});
  REQUIRE(model->parameters().size() == 4);
  REQUIRE(model->children().size() == 3);
}

TEST_CASE("a module used twice (tied weights): its parameters and buffers once, under the first name") {
  // PyTorch: named_parameters() and named_buffers() skip repeats; state_dict() keeps every name.
  Generator g(0);
  auto shared = std::make_shared<Linear>(3, 3, true, &g);
  auto bn = std::make_shared<BatchNorm1d>(3);
  Sequential model({shared, bn, std::make_shared<ReLU>(), shared, bn});
  std::vector<std::string> names, buffers;
  for (auto& [name, p] : model.named_parameters()) names.push_back(name);
  for (auto& [name, b] : model.named_buffers()) buffers.push_back(name);
  REQUIRE(names == std::vector<std::string>{"0.weight", "0.bias", "1.weight", "1.bias"});
  REQUIRE(buffers == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  const StateDict sd = model.state_dict();
  REQUIRE(sd.size() == 14);  // 2 + 2 + 3 under each of two names
  REQUIRE(sd.at("3.weight").storage() == sd.at("0.weight").storage());
  model.load_state_dict(sd);  // every name present: strict loading accepts it
  // One optimizer over the tied model steps the shared weight once, by the sum of both uses.
  SGD opt(model.parameters(), {.lr = 0.1});
  const V w0 = shared->weight.data().to_vector<float>();
  sum(model(Variable(randn({4, 3}, &g)))).backward();
  const V grad = shared->weight.grad().to_vector<float>();
  opt.step();
  const V w1 = shared->weight.data().to_vector<float>();
  for (size_t i = 0; i < w0.size(); ++i) REQUIRE(w1[i] == Approx(w0[i] - 0.1f * grad[i]));
}

TEST_CASE("state_dict round trip; strict loading names the key") {
  Generator g1(1), g2(2);
  auto a = mlp(&g1), b = mlp(&g2);
  REQUIRE(a->state_dict().at("0.weight").to_vector<float>() != b->state_dict().at("0.weight").to_vector<float>());
  b->load_state_dict(a->state_dict());
  for (auto& [name, t] : a->state_dict()) REQUIRE(b->state_dict().at(name).to_vector<float>() == t.to_vector<float>());
  // The parameter handles stay valid: loading copies values in place.
  REQUIRE(b->parameters()[0].data().storage() == b->state_dict().at("0.weight").storage());

  StateDict missing = a->state_dict();
  missing.erase("2.bias");
  REQUIRE_THROWS_WITH(b->load_state_dict(missing), Catch::Contains("missing key \"2.bias\""));
  b->load_state_dict(missing, /*strict=*/false);
  StateDict extra = a->state_dict();
  extra["3.weight"] = zeros({1});
  REQUIRE_THROWS_WITH(b->load_state_dict(extra), Catch::Contains("unexpected key \"3.weight\""));
  StateDict wrong = a->state_dict();
  wrong["0.bias"] = zeros({7});
  const V before = b->state_dict().at("0.weight").to_vector<float>();
  REQUIRE_THROWS_WITH(b->load_state_dict(wrong),
                      Catch::Contains("shape mismatch for \"0.bias\": checkpoint has (7,), model has (8,)"));
  REQUIRE(b->state_dict().at("0.weight").to_vector<float>() == before);  // nothing changed
}

TEST_CASE("loading a state whose keys carry a prefix the model lacks names the prefix") {
  Generator g(1);
  auto a = mlp(&g);
  StateDict wrapped;  // as PyTorch's DistributedDataParallel.state_dict() saves it
  for (auto& [name, t] : a->state_dict()) wrapped["module." + name] = t;
  REQUIRE_THROWS_WITH(
      a->load_state_dict(wrapped),
      Catch::Contains("every key of the state starts with \"module.\" (\"module.0.bias\"), as a Distributed") &&
          Catch::Contains("remove that prefix"));
  auto outer = std::make_shared<Sequential>(std::vector<ModulePtr>{a});  // every key gains "0."
  REQUIRE_THROWS_WITH(outer->load_state_dict(a->state_dict()),
                      Catch::Contains("saved from a model without the prefix \"0.\""));
  StateDict partial = a->state_dict();  // one key missing, the rest without a prefix: no hint
  partial.erase("0.bias");
  partial["x.0.bias"] = zeros({8});
  REQUIRE_THROWS_WITH(a->load_state_dict(partial), !Catch::Contains("prefix"));
}

TEST_CASE("a BatchNorm's running variance and batch count from a checkpoint are range-checked, in any child") {
  // A negative running variance would make every evaluation output NaN (sqrt(var + eps)),
  // with no error; the check reaches a BatchNorm at any depth and changes nothing.
  Generator g(5);
  auto model = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(4, 3, true, &g), std::make_shared<BatchNorm1d>(3)});
  StateDict bad = model->state_dict();
  for (auto& [name, t] : bad) t = t.clone();
  bad["1.running_var"] = tensor({1, -0.5, 2});
  bad["0.weight"] = zeros({3, 4});
  REQUIRE_THROWS_WITH(model->load_state_dict(bad),
                      Catch::Contains("[load_state_dict] \"1.running_var\" holds -0.5: a running variance is never "
                                      "negative"));
  REQUIRE(model->state_dict().at("0.weight").to_vector<float>() != V(12, 0.0f));  // nothing was copied
  bad["1.running_var"] = tensor({1, 0, 2});  // zero is a variance (a constant channel)
  bad["1.num_batches_tracked"] = scalar_tensor(-3).to(DType::Int64);
  REQUIRE_THROWS_WITH(model->load_state_dict(bad),
                      Catch::Contains("\"1.num_batches_tracked\" holds -3: a count of batches is never negative"));
  bad["1.num_batches_tracked"] = scalar_tensor(3).to(DType::Int64);
  model->load_state_dict(bad);
  REQUIRE(model->state_dict().at("1.running_var").to_vector<float>() == V{1, 0, 2});
}

TEST_CASE("train/eval reach every child; zero_grad clears every gradient") {
  Generator g(0);
  auto model = mlp(&g);
  model->eval();
  REQUIRE_FALSE(model->is_training());
  REQUIRE_FALSE((*model)[2]->is_training());
  model->train();
  REQUIRE((*model)[0]->is_training());
  autograd::sum((*model)(Variable(randn({2, 4}, &g)))).backward();
  for (auto& p : model->parameters()) REQUIRE(p.grad().defined());
  model->zero_grad();
  for (auto& p : model->parameters()) REQUIRE_FALSE(p.grad().defined());
}

TEST_CASE("SGD follows PyTorch's rule, step by step") {
  // One scalar parameter p = 1 with gradient 2p each step (loss p^2).
  auto run = [](SGDOptions o, int steps) {
    Variable p(tensor({1}), true);
    SGD opt({p}, o);
    std::vector<double> values;
    for (int i = 0; i < steps; ++i) {
      opt.zero_grad();
      autograd::sum(p * p).backward();
      opt.step();
      values.push_back(p.item());
    }
    return values;
  };
  // Plain: p <- p - 0.1 * 2p = 0.8 p.
  auto plain = run({.lr = 0.1}, 2);
  REQUIRE(plain[0] == Approx(0.8));
  REQUIRE(plain[1] == Approx(0.64));
  // Momentum 0.9: buf1 = 2, p1 = 1 - 0.2 = 0.8; buf2 = 0.9*2 + 1.6 = 3.4, p2 = 0.8 - 0.34 = 0.46.
  auto mom = run({.lr = 0.1, .momentum = 0.9}, 2);
  REQUIRE(mom[0] == Approx(0.8));
  REQUIRE(mom[1] == Approx(0.46));
  // Nesterov: g1 = 2 + 0.9*2 = 3.8, p1 = 0.62; g = 1.24, buf2 = 1.8 + 1.24 = 3.04,
  // step = 1.24 + 0.9*3.04 = 3.976, p2 = 0.62 - 0.3976 = 0.2224.
  auto nes = run({.lr = 0.1, .momentum = 0.9, .nesterov = true}, 2);
  REQUIRE(nes[0] == Approx(0.62));
  REQUIRE(nes[1] == Approx(0.2224));
  // Weight decay 0.5: g = 2p + 0.5p = 2.5p, p1 = 1 - 0.25 = 0.75.
  REQUIRE(run({.lr = 0.1, .weight_decay = 0.5}, 1)[0] == Approx(0.75));
  // Dampening 0.5 with momentum: buf1 = g = 2 (first step is undamped), p1 = 0.8;
  // buf2 = 0.9*2 + 0.5*1.6 = 2.6, p2 = 0.8 - 0.26 = 0.54.
  REQUIRE(run({.lr = 0.1, .momentum = 0.9, .dampening = 0.5}, 2)[1] == Approx(0.54));
  REQUIRE_THROWS_WITH(SGD({Variable(ones({1}), true)}, {.lr = -1}),
                      Catch::Contains("[SGD] learning rate must be in [0, 1e+06], got -1"));
}

TEST_CASE("an MLP learns to separate three Gaussian blobs") {
  Generator g(3);
  const int64_t n = 300;
  Tensor labels = randint(0, 3, {n}, &g);
  // Blob centres at (2,0,0,0), (0,2,0,0), (0,0,2,0) plus unit noise.
  Tensor centres = eq(labels.unsqueeze(1), arange(0, 4, 1, DType::Int64)) * 2.0;
  Tensor x = centres + randn({n, 4}, &g) * 0.5;
  auto model = mlp(&g);
  SGD opt(model->parameters(), {.lr = 0.1, .momentum = 0.9});
  double first = 0, last = 0;
  for (int step = 0; step < 100; ++step) {
    opt.zero_grad();
    Variable loss = cross_entropy((*model)(Variable(x)), labels);
    loss.backward();
    opt.step();
    (step == 0 ? first : last) = loss.item();
  }
  autograd::NoGradGuard no_grad;
  const double accuracy = mean(eq(argmax((*model)(Variable(x)).data(), 1), labels)).item();
  INFO("loss " << first << " -> " << last << ", accuracy " << accuracy);
  REQUIRE(last < first / 5);
  REQUIRE(accuracy > 0.97);
}

TEST_CASE("to(device) keeps parameters and buffers, and says so when the device is missing") {
  Generator g(0);
  auto model = std::make_shared<Sequential>(
      std::vector<ModulePtr>{std::make_shared<Linear>(4, 3, true, &g), std::make_shared<BatchNorm1d>(3)});
  const Variable w = model->parameters()[0];
  model->to(Device::cpu());  // already there: nothing changes
  REQUIRE(model->parameters()[0].data().storage() == w.data().storage());
  std::vector<std::string> names;
  for (auto& [n, b] : model->named_buffers()) names.push_back(n);
  REQUIRE(names == std::vector<std::string>{"1.running_mean", "1.running_var", "1.num_batches_tracked"});
  if (cuda::device_count() == 0) {
    REQUIRE_THROWS_WITH(model->to(Device::cuda(0)), Catch::Contains("[cuda]"));
    WARN("SKIPPED: moving a module to cuda:0 (no usable GPU: " << cuda::unavailable_reason() << ")");
    return;
  }
  model->to(Device::cuda(0));
  for (auto& p : model->parameters()) REQUIRE(p.data().device() == Device::cuda(0));
  for (auto& [n, b] : model->named_buffers()) REQUIRE(b.device() == Device::cuda(0));
  REQUIRE(w.data().device() == Device::cuda(0));  // the handle held outside sees the move
  model->to(Device::cpu());
  REQUIRE(w.data().device() == Device::cpu());
}

TEST_CASE("set_child refuses a null module and a module that would contain itself") {
  // A cycle would make parameters(), train() and forward() recurse until the stack overflows.
  auto inner = std::make_shared<Sequential>(std::vector<ModulePtr>{std::make_shared<ReLU>()});
  auto outer = std::make_shared<Sequential>(std::vector<ModulePtr>{inner});
  REQUIRE_THROWS_WITH(outer->set_child("0", nullptr),
                      Catch::Contains("[set_child] the module given for \"0\" is null"));
  REQUIRE_THROWS_WITH(inner->set_child("0", outer),
                      Catch::Contains("the module given for \"0\" contains this module (or is it): a model cannot be "
                                      "inside itself"));
  REQUIRE_THROWS_WITH(outer->set_child("0", outer), Catch::Contains("cannot be inside itself"));
  REQUIRE(outer->parameters().empty());  // still a tree
  inner->set_child("0", std::make_shared<Linear>(2, 2));
  REQUIRE(outer->parameters().size() == 2);
}
