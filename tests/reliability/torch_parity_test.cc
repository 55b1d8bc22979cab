// Our ops against PyTorch's, case by case: every differentiable op, on inputs laid out in
// memory four ways (contiguous, a transposed view, every other row of a larger tensor, a
// broadcast expand), with broadcasting between operands, forward and backward; and the
// bfloat16 and float16 ops bit for bit. The test computes our side and writes it to a
// safetensors file; torch_parity.py recomputes each case with /usr/bin/python3's PyTorch
// and names every disagreement. Where PyTorch is missing, it says it was skipped and why.
#include <cstdio>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "nn/batchnorm.h"
#include "nn/functional.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using autograd::Variable;
namespace ag = engine::autograd;

namespace {

enum Layout { kContiguous, kTransposed, kEveryOtherRow, kExpanded, kLayouts };
const char* const kLayoutNames[] = {"contiguous", "transposed", "every-other-row", "expanded"};

// An input of shape s laid out as `layout` asks (the layouts a shape cannot take fall back
// to contiguous); `positive` keeps it in [0.1, inf) for log, sqrt, pow and division.
Tensor make_input(const Shape& s, Layout layout, bool positive, Generator& gen) {
  Shape storage = s;
  Tensor t;
  if (layout == kTransposed && s.size() >= 2) {
    std::swap(storage[s.size() - 1], storage[s.size() - 2]);
    t = randn(storage, &gen).transpose(-1, -2);
  } else if (layout == kEveryOtherRow && !s.empty()) {
    storage[0] *= 2;
    t = randn(storage, &gen).slice(0, 0, storage[0], 2);
  } else if (layout == kExpanded && !s.empty() && s[0] > 1) {
    storage[0] = 1;
    t = randn(storage, &gen).expand(s);
  } else {
    t = randn(s, &gen);
  }
  if (!positive) return t;
  Tensor p = abs(t) + 0.1;  // a contiguous copy: back to the layout asked for
  if (layout == kTransposed && s.size() >= 2) return p.transpose(-1, -2).contiguous().transpose(-1, -2);
  if (layout == kEveryOtherRow && !s.empty()) return zeros(storage).slice(0, 0, storage[0], 2).copy_(p);
  return layout == kExpanded && !s.empty() && s[0] > 1 ? p.narrow(0, 0, 1).expand(s) : p;
}

using Fn = std::function<Variable(const std::vector<Variable>&)>;

struct Case {
  std::string name, torch;  // torch: the same computation in PyTorch, over a0, a1, ...
  std::vector<Shape> shapes;
  std::vector<Layout> layouts;
  bool positive;
  Fn fn;
};

// BatchNorm in training (its fused CPU passes, with ReLU and with ReLU and a 2x2 pool),
// and in evaluation after one training step (with the running statistics it left), with
// gradients and without (the no-gradient passes are others). Weight and bias are inputs 1
// and 2; the evaluation cases train on input 0 and normalise input 3.
void batch_norm_cases(std::vector<Case>& cases) {
  using Then = std::function<Variable(nn::BatchNorm&, const Variable&)>;
  const std::vector<std::tuple<std::string, std::string, Then>> tails = {
      {"", "{}", [](nn::BatchNorm& bn, const Variable& x) { return bn.forward(x); }},
      {", relu", "torch.relu({})", [](nn::BatchNorm& bn, const Variable& x) { return bn.forward_relu(x); }},
      {", relu, max_pool2d 2", "torch.nn.functional.max_pool2d(torch.relu({}), 2)",
       [](nn::BatchNorm& bn, const Variable& x) { return bn.forward_relu_pool2(x); }}};
  const std::string train =
      "torch.nn.functional.batch_norm(a0, torch.zeros(3).double(), torch.ones(3).double(), a1, a2, "
      "training=True)";
  const std::string eval = "batch_norm_after_a_step(a0, a3, a1, a2)";  // torch_parity.py
  for (const Shape& shape : {Shape{4, 3, 6, 8}, Shape{2, 3, 7, 9}})
    for (int l = 0; l < kLayouts; ++l) {
      const std::string at = " " + shape_str(shape) + "/" + kLayoutNames[l];
      const std::vector<Shape> shapes = {shape, {3}, {3}, shape};
      const std::vector<Layout> layouts = {Layout(l), kContiguous, kContiguous, Layout(l)};
      for (const auto& [name, torch, then] : tails) {
        const std::string expr = torch.substr(0, torch.find("{}"));
        const std::string close = torch.substr(torch.find("{}") + 2);
        cases.push_back({"batch_norm" + name + at, expr + train + close, shapes, layouts, false,
                         [then = then](const std::vector<Variable>& a) {
                           nn::BatchNorm2d bn(3);
                           bn.weight = a[1], bn.bias = a[2];
                           return then(bn, a[0]);
                         }});
        for (bool grad : {true, false})
          cases.push_back({"batch_norm eval" + name + (grad ? "" : " (no grad)") + at, expr + eval + close, shapes,
                           layouts, false, [then = then, grad](const std::vector<Variable>& a) {
                             nn::BatchNorm2d bn(3);
                             bn.weight = a[1], bn.bias = a[2];
                             bn.forward(a[0]);
                             bn.eval();
                             std::optional<autograd::NoGradGuard> off;
                             if (!grad) off.emplace();
                             return then(bn, a[3]);
                           }});
      }
    }
}

std::vector<Case> float32_cases() {
  std::vector<Case> cases;
  auto unary = [&](const std::string& name, const std::string& torch, bool positive,
                   std::function<Variable(const Variable&)> f) {
    for (int l = 0; l < kLayouts; ++l)
      cases.push_back(
          {name + "/" + kLayoutNames[l], torch, {{5, 7}}, {Layout(l)}, positive, [f](const std::vector<Variable>& a) {
             return f(a[0]);
           }});
  };
  unary("neg", "-a0", false, [](const Variable& a) { return ag::neg(a); });
  unary("abs", "a0.abs()", false, [](const Variable& a) { return ag::abs(a); });
  unary("exp", "a0.exp()", false, [](const Variable& a) { return ag::exp(a); });
  unary("log", "a0.log()", true, [](const Variable& a) { return ag::log(a); });
  unary("sqrt", "a0.sqrt()", true, [](const Variable& a) { return ag::sqrt(a); });
  unary("tanh", "a0.tanh()", false, [](const Variable& a) { return ag::tanh(a); });
  unary("sigmoid", "a0.sigmoid()", false, [](const Variable& a) { return ag::sigmoid(a); });
  unary("relu", "a0.relu()", false, [](const Variable& a) { return ag::relu(a); });
  unary("pow 3", "a0.pow(3)", false, [](const Variable& a) { return ag::pow(a, 3.0); });
  unary("pow 0.5", "a0.pow(0.5)", true, [](const Variable& a) { return ag::pow(a, 0.5); });
  unary("pow -1", "a0.pow(-1)", true, [](const Variable& a) { return ag::pow(a, -1.0); });
  unary("pow 1.7", "a0.pow(1.7)", true, [](const Variable& a) { return ag::pow(a, 1.7); });
  unary("clamp", "a0.clamp(-0.5, 0.7)", false, [](const Variable& a) { return ag::clamp(a, -0.5, 0.7); });
  unary("scalar - x", "2.5 - a0", false, [](const Variable& a) { return 2.5 - a; });
  unary("scalar / x", "2.5 / a0", true, [](const Variable& a) { return 2.5 / a; });
  unary("sum", "a0.sum()", false, [](const Variable& a) { return ag::sum(a); });
  unary("sum dim 0", "a0.sum(0)", false, [](const Variable& a) { return ag::sum(a, {0}); });
  unary("sum dim 1 keepdim", "a0.sum(1, keepdim=True)", false, [](const Variable& a) { return ag::sum(a, {1}, true); });
  unary("mean dim -2", "a0.mean(-2)", false, [](const Variable& a) { return ag::mean(a, {-2}); });
  unary("max dim 1", "a0.amax(1)", false, [](const Variable& a) { return ag::max(a, {1}); });
  unary("min dim 0 keepdim", "a0.amin(0, keepdim=True)", false,
        [](const Variable& a) { return ag::min(a, {0}, true); });
  unary("var dim 1", "a0.var(1)", false, [](const Variable& a) { return ag::var(a, {1}); });
  unary("var dim 0 biased", "a0.var(0, correction=0)", false,
        [](const Variable& a) { return ag::var(a, {0}, false, 0); });
  unary("transpose", "a0.t()", false, [](const Variable& a) { return ag::transpose(a, 0, 1); });
  unary("reshape", "a0.reshape(7, 5)", false, [](const Variable& a) { return ag::reshape(a, {7, 5}); });
  unary("slice with step", "a0[:, 1:6:2]", false, [](const Variable& a) { return ag::slice(a, 1, 1, 6, 2); });
  unary("select -1", "a0.select(0, -1)", false, [](const Variable& a) { return ag::select(a, 0, -1); });
  unary("expand", "a0.unsqueeze(0).expand(3, 5, 7)", false, [](const Variable& a) {
    return ag::expand(ag::unsqueeze(a, 0), {3, 5, 7});
  });
  unary("log_softmax", "torch.log_softmax(a0, -1)", false, [](const Variable& a) { return nn::log_softmax(a); });
  unary("where", "torch.where(a0 > 0, a0, a0 * 2)", false,
        [](const Variable& a) { return ag::where(ag::gt(a, Variable(zeros({1}))).data(), a, a * 2.0); });

  auto binary = [&](const std::string& name, const std::string& torch, bool positive, const Shape& s0, const Shape& s1,
                    std::function<Variable(const Variable&, const Variable&)> f) {
    for (int l0 = 0; l0 < kLayouts; ++l0)
      for (Layout l1 : {kContiguous, kExpanded})
        cases.push_back({name + "/" + kLayoutNames[l0] + "," + kLayoutNames[l1],
                         torch,
                         {s0, s1},
                         {Layout(l0), l1},
                         positive,
                         [f](const std::vector<Variable>& a) { return f(a[0], a[1]); }});
  };
  const std::vector<std::pair<Shape, Shape>> broadcasts = {{{4, 6}, {4, 6}},    {{4, 6}, {6}}, {{4, 1}, {1, 6}},
                                                           {{3, 4, 6}, {4, 1}}, {{6}, {4, 6}}, {{2, 1, 6}, {3, 1}}};
  for (const auto& [s0, s1] : broadcasts) {
    const std::string shapes = " " + shape_str(s0) + "," + shape_str(s1);
    binary("add" + shapes, "a0 + a1", false, s0, s1, [](auto& a, auto& b) { return a + b; });
    binary("sub" + shapes, "a0 - a1", false, s0, s1, [](auto& a, auto& b) { return a - b; });
    binary("mul" + shapes, "a0 * a1", false, s0, s1, [](auto& a, auto& b) { return a * b; });
    binary("div" + shapes, "a0 / a1", true, s0, s1, [](auto& a, auto& b) { return a / b; });
    binary("pow" + shapes, "a0.pow(a1)", true, s0, s1, [](auto& a, auto& b) { return ag::pow(a, b); });
    binary("maximum" + shapes, "torch.maximum(a0, a1)", false, s0, s1,
           [](auto& a, auto& b) { return ag::maximum(a, b); });
    binary("minimum" + shapes, "torch.minimum(a0, a1)", false, s0, s1,
           [](auto& a, auto& b) { return ag::minimum(a, b); });
  }
  const std::vector<std::pair<Shape, Shape>> products = {
      {{5, 7}, {7, 3}}, {{2, 5, 7}, {2, 7, 3}},   {{2, 5, 7}, {7, 3}}, {{7}, {7, 3}}, {{5, 7}, {7}},
      {{7}, {7}},       {{2, 1, 5, 7}, {3, 7, 4}}};
  for (const auto& [s0, s1] : products)
    binary("matmul " + shape_str(s0) + "," + shape_str(s1), "a0 @ a1", false, s0, s1,
           [](auto& a, auto& b) { return ag::matmul(a, b); });

  for (int l = 0; l < kLayouts; ++l) {
    const std::string at = std::string("/") + kLayoutNames[l];
    const Layout lay = Layout(l);
    cases.push_back({"linear" + at,
                     "torch.nn.functional.linear(a0, a1, a2)",
                     {{3, 6, 5}, {4, 5}, {4}},
                     {lay, lay, kContiguous},
                     false,
                     [](auto& a) { return nn::linear(a[0], a[1], a[2]); }});
    for (auto [stride, padding] : std::vector<std::pair<int, int>>{{1, 0}, {1, 1}, {2, 1}, {3, 2}}) {
      const std::string sp = std::to_string(stride) + ", padding=" + std::to_string(padding);
      cases.push_back({"conv2d stride=" + sp + at,
                       "torch.nn.functional.conv2d(a0, a1, a2, stride=" + sp + ")",
                       {{2, 3, 9, 8}, {4, 3, 3, 3}, {4}},
                       {lay, lay, kContiguous},
                       false,
                       [s = stride, p = padding](auto& a) { return nn::conv2d(a[0], a[1], a[2], s, p); }});
    }
    cases.push_back({"conv2d unbatched" + at,
                     "torch.nn.functional.conv2d(a0, a1, a2, stride=2, padding=1)",
                     {{3, 9, 8}, {4, 3, 3, 3}, {4}},
                     {lay, kContiguous, kContiguous},
                     false,
                     [](auto& a) { return nn::conv2d(a[0], a[1], a[2], 2, 1); }});
    for (auto [k, stride, padding] : std::vector<std::tuple<int, int, int>>{{2, 2, 0}, {3, 2, 1}, {3, 1, 1}}) {
      const std::string args = std::to_string(k) + ", " + std::to_string(stride) + ", " + std::to_string(padding);
      cases.push_back({"max_pool2d " + args + at,
                       "torch.nn.functional.max_pool2d(a0, " + args + ")",
                       {{2, 3, 9, 8}},
                       {lay},
                       false,
                       [k = k, s = stride, p = padding](auto& a) { return nn::max_pool2d(a[0], k, s, p); }});
    }
    cases.push_back({"mse_loss" + at,
                     "torch.nn.functional.mse_loss(a0, a1)",
                     {{6, 5}, {6, 5}},
                     {lay, kContiguous},
                     false,
                     [](auto& a) { return nn::mse_loss(a[0], a[1]); }});
    cases.push_back({"cross_entropy" + at,
                     "torch.nn.functional.cross_entropy(a0, torch.tensor([0, 3, 4, 1, 2, 2]))",
                     {{6, 5}},
                     {lay},
                     false,
                     [](auto& a) {
                       return nn::cross_entropy(a[0], from_vector(std::vector<int64_t>{0, 3, 4, 1, 2, 2}));
                     }});
  }
  batch_norm_cases(cases);
  return cases;
}

// Runs every case: its inputs, weights, output and gradients go into `out`, its PyTorch
// expression into `torch` (keyed by the case's name).
void run_float32(nn::StateDict& out, nn::Metadata& torch) {
  Generator gen(7);
  for (const Case& c : float32_cases()) {
    INFO(c.name);
    std::vector<Variable> in;
    for (size_t i = 0; i < c.shapes.size(); ++i) {
      const Tensor t = make_input(c.shapes[i], c.layouts[i], c.positive, gen);
      REQUIRE(t.shape() == c.shapes[i]);
      in.emplace_back(t, true);
      out[c.name + "/in" + std::to_string(i)] = t.contiguous();
    }
    const Variable y = c.fn(in);
    out[c.name + "/out"] = y.data().contiguous();
    torch[c.name] = c.torch;
    if (!y.requires_grad()) continue;  // computed without gradients: no weights, PyTorch's side neither
    const Tensor w = randn(y.shape(), &gen);
    ag::sum(y * Variable(w)).backward();
    out[c.name + "/w"] = w;
    for (size_t i = 0; i < in.size(); ++i)
      if (in[i].grad().defined()) out[c.name + "/g" + std::to_string(i)] = in[i].grad().contiguous();
  }
}

// bfloat16 and float16: computed in float32 and rounded once to the 16-bit type, as
// PyTorch does, so the two must agree bit for bit. float16 runs only what PyTorch 1.13's
// CPU has float16 kernels for.
void run_16bit(nn::StateDict& out, nn::Metadata& torch) {
  Generator gen(3);
  const Tensor a = randn({24, 40}, &gen) * 3.0, b = randn({24, 40}, &gen) * 3.0, w = randn({40, 16}, &gen);
  out["half/a"] = a, out["half/b"] = b, out["half/w"] = w;
  using F = std::function<Tensor(const Tensor&, const Tensor&, const Tensor&)>;
  struct Op {
    std::string name, torch;
    bool float16;  // PyTorch 1.13 has it for float16 on the CPU
    F f;
  };
  const std::vector<Op> ops = {
      {"add", "A + B", true, [](auto& A, auto& B, auto&) { return A + B; }},
      {"mul", "A * B", true, [](auto& A, auto& B, auto&) { return A * B; }},
      {"div", "A / B", true, [](auto& A, auto& B, auto&) { return A / B; }},
      {"x * 0.1", "A * 0.1", true, [](auto& A, auto&, auto&) { return A * 0.1; }},
      {"1 / x", "1.0 / A", true, [](auto& A, auto&, auto&) { return 1.0 / A; }},
      {"pow 1.5", "A.abs().pow(1.5)", true, [](auto& A, auto&, auto&) { return pow(abs(A), 1.5); }},
      {"maximum", "torch.maximum(A, B)", true, [](auto& A, auto& B, auto&) { return maximum(A, B); }},
      {"sum", "A.sum()", true, [](auto& A, auto&, auto&) { return sum(A); }},
      {"sum dim 0", "A.sum(0)", true, [](auto& A, auto&, auto&) { return sum(A, {0}); }},
      {"max dim 1", "A.amax(1)", true, [](auto& A, auto&, auto&) { return max(A, {1}); }},
      {"var dim 1", "A.var(1)", true, [](auto& A, auto&, auto&) { return var(A, {1}); }},
      // PyTorch 1.13 rounds the sum to 16 bits, then rounds the quotient again (up to 2
      // units in the last place off); we round the float32 mean once, and say so here.
      {"mean dim 1", "A.float().mean(1).to(A.dtype)", true, [](auto& A, auto&, auto&) { return mean(A, {1}); }},
      {"exp", "A.exp()", false, [](auto& A, auto&, auto&) { return exp(A); }},
      {"log", "A.abs().log()", false, [](auto& A, auto&, auto&) { return log(abs(A)); }},
      {"tanh", "A.tanh()", false, [](auto& A, auto&, auto&) { return tanh(A); }},
      {"sigmoid", "A.sigmoid()", false, [](auto& A, auto&, auto&) { return sigmoid(A); }},
      {"clamp", "A.clamp(-1.3, 2.1)", false, [](auto& A, auto&, auto&) { return clamp(A, -1.3, 2.1); }},
      {"matmul", "A @ W", false, [](auto& A, auto&, auto& W) { return matmul(A, W); }},
      {"matmul transposed", "A.t() @ B", false, [](auto& A, auto& B, auto&) { return matmul(A.transpose(0, 1), B); }},
  };
  for (DType dt : {DType::BFloat16, DType::Float16}) {
    const Tensor A = a.to(dt), B = b.to(dt), W = w.to(dt);
    for (const Op& op : ops) {
      if (dt == DType::Float16 && !op.float16) continue;
      const std::string key = std::string(dtype_name(dt)) + "/" + op.name;
      INFO(key);
      const Tensor y = op.f(A, B, W);
      REQUIRE(y.dtype() == dt);
      out[key] = y.to(DType::Float32).contiguous();
      torch[key] = op.torch;
    }
  }
}

}  // namespace

TEST_CASE("every op, forward and backward, on strided and broadcast inputs, agrees with PyTorch") {
  if (std::system("/usr/bin/python3 -c 'import torch' >/dev/null 2>&1") != 0) {
    WARN("SKIPPED: /usr/bin/python3 with torch is not available (bash tools/setup.sh --bench installs it)");
    return;
  }
  nn::StateDict out;
  nn::Metadata torch;
  run_float32(out, torch);
  run_16bit(out, torch);
  const std::string path = engine::testing::tmp_path("torch_parity.safetensors");
  nn::save_safetensors(path, out, torch);
  FILE* p = popen(("/usr/bin/python3 tests/reliability/torch_parity.py " + path + " 2>&1").c_str(), "r");
  REQUIRE(p != nullptr);
  std::string report;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) report.append(buf, n);
  const int status = pclose(p);
  INFO(report);
  REQUIRE(status == 0);
  REQUIRE(report.find("cases " + std::to_string(torch.size()) + " mismatches 0\n") != std::string::npos);
  const size_t largest = report.find("largest");
  std::printf("%zu cases agree with PyTorch; %s", torch.size(),
              report.substr(largest, report.find('\n', largest) - largest + 1).c_str());
}
