// Every tensor op on the GPU against the CPU reference, on fresh random inputs each run,
// with outputs poisoned (tests/testing/gpu.h). The bound per op is stated where it is
// checked (relative, ||gpu - cpu|| / ||cpu||): 0 where both compute the same float
// operations (copies, max, int64), 1e-7 to 1e-6 for one rounding or the GPU's libm,
// 1e-6 for sums (another order), 1e-5 for variance and for matmul (FP32 cuBLAS).
// Without a GPU each case says it was skipped and why.
#include <array>
#include <climits>
#include <cmath>
#include <functional>
#include <random>

#include "catch2/catch.hpp"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/gemm.h"
#include "tensor/half.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"
#include "tests/testing/gpu.h"

using namespace engine;
using testing::gpu;
using testing::rel_error;

namespace {
const Device kGpu = Device::cuda(0);
using Binary = std::function<Tensor(const Tensor&, const Tensor&)>;
using Unary = std::function<Tensor(const Tensor&)>;
}  // namespace

TEST_CASE("binary ops on the GPU match the CPU: same shape, broadcast, strided views, scalars") {
  if (!testing::gpu_or_skip("binary ops on the GPU")) return;
  Generator g = testing::fresh_generator();
  const std::vector<std::pair<const char*, Binary>> ops = {
      {"add", [](auto& a, auto& b) { return add(a, b); }},
      {"sub", [](auto& a, auto& b) { return sub(a, b); }},
      {"mul", [](auto& a, auto& b) { return mul(a, b); }},
      {"div", [](auto& a, auto& b) { return div(a, b); }},
      {"maximum", [](auto& a, auto& b) { return maximum(a, b); }},
      {"minimum", [](auto& a, auto& b) { return minimum(a, b); }},
      {"eq", [](auto& a, auto& b) { return eq(a, b); }},
      {"ne", [](auto& a, auto& b) { return ne(a, b); }},
      {"lt", [](auto& a, auto& b) { return lt(a, b); }},
      {"le", [](auto& a, auto& b) { return le(a, b); }},
      {"gt", [](auto& a, auto& b) { return gt(a, b); }},
      {"ge", [](auto& a, auto& b) { return ge(a, b); }},
      {"pow", [](auto& a, auto& b) { return pow(abs(a) + 0.5, b); }},
  };
  const Tensor a = randn({37, 65}, &g), b = randn({37, 65}, &g), row = randn({65}, &g), col = randn({37, 1}, &g);
  const Tensor big = randn({1 << 20}, &g), big2 = randn({1 << 20}, &g);  // the vectorised path
  const Tensor t = randn({65, 37}, &g).transpose(0, 1);                  // a strided view
  for (auto& [name, f] : ops) {
    INFO("op " << name);
    CHECK(rel_error(f(a.to(kGpu), b.to(kGpu)), f(a, b)) <= 1e-6);
    CHECK(rel_error(f(a.to(kGpu), row.to(kGpu)), f(a, row)) <= 1e-6);
    CHECK(rel_error(f(col.to(kGpu), row.to(kGpu)), f(col, row)) <= 1e-6);
    CHECK(rel_error(f(t.to(kGpu), a.to(kGpu)), f(t, a)) <= 1e-6);
    CHECK(rel_error(f(a.to(kGpu).transpose(0, 1), t.transpose(0, 1).to(kGpu)),
                    f(a.transpose(0, 1), t.transpose(0, 1))) <= 1e-6);
    CHECK(rel_error(f(a.to(kGpu), scalar_tensor(0.25)), f(a, scalar_tensor(0.25))) <= 1e-6);  // a host scalar
    CHECK(rel_error(f(big.to(kGpu), big2.to(kGpu)), f(big, big2)) <= 1e-6);
    CHECK(rel_error(f(big.to(kGpu).narrow(0, 1, 1000), big2.to(kGpu).narrow(0, 3, 1000)),  // misaligned: scalar path
                    f(big.narrow(0, 1, 1000), big2.narrow(0, 3, 1000))) <= 1e-6);
  }
  // int64 arithmetic is exact.
  const Tensor i = randint(-50, 50, {300}, &g), j = randint(1, 9, {300}, &g);
  for (auto& [name, f] : ops) {
    if (std::string(name) == "pow" || std::string(name) == "div") continue;
    INFO("int64 op " << name);
    CHECK(rel_error(f(i.to(kGpu), j.to(kGpu)), f(i, j)) == 0);
  }
  CHECK(rel_error(div(i.to(kGpu), j.to(kGpu)), div(i, j)) == 0);
  // A mix of devices is an error naming both.
  CHECK_THROWS_WITH(add(a.to(kGpu), b), Catch::Contains("cuda:0") && Catch::Contains("cpu"));
}

TEST_CASE("unary ops, where, copies and fill on the GPU match the CPU") {
  if (!testing::gpu_or_skip("unary ops on the GPU")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({123, 77}, &g) * 3.0, pos = abs(x) + 0.1;
  const std::vector<std::tuple<const char*, Unary, double>> ops = {
      {"neg", [](auto& a) { return neg(a); }, 0},
      {"abs", [](auto& a) { return abs(a); }, 0},
      {"relu", [](auto& a) { return relu(a); }, 0},
      {"clamp", [](auto& a) { return clamp(a, -1, 2); }, 0},
      {"square", [](auto& a) { return pow(a, 2.0); }, 0},
      {"exp", [](auto& a) { return exp(a); }, 1e-6},
      {"tanh", [](auto& a) { return tanh(a); }, 1e-6},
      {"sigmoid", [](auto& a) { return sigmoid(a); }, 1e-6},
      {"log", [](auto& a) { return log(abs(a) + 0.1); }, 1e-6},
      {"sqrt", [](auto& a) { return sqrt(abs(a)); }, 1e-6},
      {"pow 1.5", [](auto& a) { return pow(abs(a), 1.5); }, 1e-6},
  };
  for (auto& [name, f, bound] : ops) {
    INFO("op " << name);
    CHECK(rel_error(f(x.to(kGpu)), f(x)) <= std::max(bound, 1e-7));
    CHECK(rel_error(f(x.to(kGpu).transpose(0, 1)), f(x.transpose(0, 1))) <= std::max(bound, 1e-7));
  }
  // Signed zero and INT64_MIN as on the CPU (and in PyTorch): abs(-0.0) is +0.0, abs and
  // neg of INT64_MIN wrap to INT64_MIN.
  CHECK_FALSE(std::signbit(abs(tensor({-0.0f}).to(kGpu)).item()));
  const Tensor lo = from_vector(std::vector<int64_t>{INT64_MIN, -3, 5});
  CHECK(abs(lo.to(kGpu)).to_vector<int64_t>() == abs(lo).to_vector<int64_t>());
  CHECK(neg(lo.to(kGpu)).to_vector<int64_t>() == neg(lo).to_vector<int64_t>());
  const Tensor c = gt(randn({123, 1}, &g), scalar_tensor(0.0));
  CHECK(rel_error(where(c.to(kGpu), x.to(kGpu), pos.to(kGpu)), where(c, x, pos)) == 0);
  CHECK(rel_error(where(c.to(kGpu), x.to(kGpu), scalar_tensor(-7.0)), where(c, x, scalar_tensor(-7.0))) == 0);
  // copy_ between devices, into strided views, with dtype changes; fill_ on a view.
  Tensor d = zeros({77, 123}, DType::Float32, kGpu);
  d.copy_(x.transpose(0, 1));
  CHECK(rel_error(d, x.transpose(0, 1)) == 0);
  Tensor e = zeros({123, 77}, DType::Float32, kGpu);
  e.transpose(0, 1).copy_(d);
  CHECK(rel_error(e, x) == 0);
  CHECK(rel_error(x.to(kGpu).to(DType::Int64), x.to(DType::Int64)) == 0);
  Tensor f = x.clone().to(kGpu);
  f.narrow(1, 5, 10).fill_(3.5);
  Tensor fc = x.clone();
  fc.narrow(1, 5, 10).fill_(3.5);
  CHECK(rel_error(f, fc) == 0);
  // In place: add_ with a broadcast row and a scale, mul_ on a view.
  const Tensor r = randn({77}, &g);
  Tensor h = x.to(kGpu), hc = x.clone();
  add_(h, r.to(kGpu), 0.5), add_(hc, r, 0.5);
  Tensor hv = h.narrow(0, 3, 50), hcv = hc.narrow(0, 3, 50);
  mul_(hv, -2.0), mul_(hcv, -2.0);
  CHECK(rel_error(h, hc) <= 1e-6);
  CHECK(x.to(kGpu).at({5, 6}) == x.at({5, 6}));
  // A source overlapping the destination (a shift in place) is read whole first, as on the
  // CPU: copy_ and add_.
  const Tensor line = randn({1 << 20}, &g);
  Tensor sg = line.to(kGpu), sc = line.clone();
  sg.narrow(0, 1, (1 << 20) - 1).copy_(sg.narrow(0, 0, (1 << 20) - 1));
  sc.narrow(0, 1, (1 << 20) - 1).copy_(sc.narrow(0, 0, (1 << 20) - 1));
  CHECK(rel_error(sg, sc) == 0);
  Tensor ag = line.to(kGpu), ac = line.clone();
  Tensor ag_tail = ag.narrow(0, 1, (1 << 20) - 1), ac_tail = ac.narrow(0, 1, (1 << 20) - 1);
  add_(ag_tail, ag.narrow(0, 0, (1 << 20) - 1)), add_(ac_tail, ac.narrow(0, 0, (1 << 20) - 1));
  CHECK(rel_error(ag, ac) == 0);
  // relu's gradient, one pass: g where x > 0 or x is NaN, else 0 (PyTorch's threshold_backward).
  Tensor xr = x.clone();
  xr.narrow(1, 0, 3).fill_(0.0), xr.narrow(1, 3, 2).fill_(NAN);
  const Tensor gr = randn({123, 77}, &g);
  CHECK(rel_error(relu_backward(gr.to(kGpu), xr.to(kGpu)), relu_backward(gr, xr)) == 0);
  CHECK(rel_error(relu_backward(gr.to(kGpu).transpose(0, 1), xr.to(kGpu).transpose(0, 1)),
                  relu_backward(gr.transpose(0, 1), xr.transpose(0, 1))) == 0);
}

TEST_CASE("reductions on the GPU match the CPU") {
  if (!testing::gpu_or_skip("reductions on the GPU")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({6, 50, 33}, &g);
  const Tensor xg = x.to(kGpu);
  for (std::vector<int64_t> dims : std::vector<std::vector<int64_t>>{{}, {0}, {1}, {2}, {-1}, {0, 2}, {0, 1}, {1, 2}}) {
    for (bool keep : {false, true}) {
      INFO("dims " << dims.size() << (dims.empty() ? -9 : dims[0]) << " keepdim " << keep);
      CHECK(rel_error(sum(xg, dims, keep), sum(x, dims, keep)) <= 1e-6);
      CHECK(rel_error(mean(xg, dims, keep), mean(x, dims, keep)) <= 1e-6);
      CHECK(rel_error(var(xg, dims, keep), var(x, dims, keep)) <= 1e-5);
      CHECK(rel_error(max(xg, dims, keep), max(x, dims, keep)) == 0);
      CHECK(rel_error(min(xg, dims, keep), min(x, dims, keep)) == 0);
      CHECK(rel_error(sum(xg.transpose(0, 2), dims, keep), sum(x.transpose(0, 2), dims, keep)) <= 1e-6);
    }
  }
  for (int64_t d : {0, 1, 2}) CHECK(rel_error(argmax(xg, d), argmax(x, d)) == 0);
  // Long rows take the two-pass path; many short rows the one-block-per-row path.
  const Tensor big = randn({3, 3000001}, &g);
  CHECK(rel_error(sum(big.to(kGpu), {1}), sum(big, {1})) <= 1e-6);
  CHECK(rel_error(sum(big.to(kGpu)), sum(big)) <= 1e-6);
  CHECK(rel_error(max(big.to(kGpu)), max(big)) == 0);
  const Tensor ints = randint(-1000, 1000, {40, 999}, &g);
  CHECK(rel_error(sum(ints.to(kGpu), {1}), sum(ints, {1})) == 0);
  // NaN propagates through max and wins argmax, as on the CPU.
  Tensor n = randn({4, 9}, &g);
  n.select(0, 2).narrow(0, 4, 1).fill_(NAN);
  CHECK(rel_error(max(n.to(kGpu), {1}), max(n, {1})) == 0);
  CHECK(rel_error(argmax(n.to(kGpu), 1), argmax(n, 1)) == 0);
  // Leading dims reduced (a bias gradient): each column's rows are split into runs combined
  // in row order, so a tie or a NaN still picks the first row, as on the CPU.
  Tensor cols = randn({300, 37}, &g);
  cols.select(1, 3).fill_(1.0);  // every row ties: row 0
  cols.select(1, 5).narrow(0, 250, 1).fill_(NAN), cols.select(1, 5).narrow(0, 40, 1).fill_(NAN);  // row 40
  CHECK(rel_error(argmax(cols.to(kGpu), 0), argmax(cols, 0)) == 0);
  CHECK(rel_error(sum(cols.to(kGpu).narrow(1, 6, 31), {0}), sum(cols.narrow(1, 6, 31), {0})) <= 1e-6);
  const Tensor int_cols = randint(-1000, 1000, {513, 70}, &g);
  CHECK(rel_error(sum(int_cols.to(kGpu), {0}), sum(int_cols, {0})) == 0);
  CHECK(rel_error(max(int_cols.to(kGpu), {0}), max(int_cols, {0})) == 0);
}

TEST_CASE("im2col and col2im on the GPU match the CPU in both column layouts") {
  if (!testing::gpu_or_skip("im2col and col2im on the GPU")) return;
  Generator g = testing::fresh_generator();
  const Tensor x = randn({3, 5, 13, 11}, &g);
  for (auto [k, s, p] : std::vector<std::array<int64_t, 3>>{{3, 1, 1}, {5, 2, 2}, {2, 2, 0}, {3, 3, 0}, {1, 1, 0}})
    for (ColumnLayout layout : {ColumnLayout::PerImage, ColumnLayout::BatchInColumns}) {
      INFO("kernel " << k << " stride " << s << " padding " << p << " batch in columns "
                     << (layout == ColumnLayout::BatchInColumns));
      const Tensor cols = im2col(x, k, k, s, p, layout);
      CHECK(rel_error(im2col(x.to(kGpu), k, k, s, p, layout), cols) == 0);  // copies and zeros
      const Tensor dcols = randn(cols.shape(), &g);
      CHECK(rel_error(col2im(dcols.to(kGpu), x.shape(), k, k, s, p, layout),
                      col2im(dcols, x.shape(), k, k, s, p, layout)) <=
            1e-6);  // at most k*k terms per pixel, perhaps in another order
    }
}

TEST_CASE("matmul on the GPU (cuBLAS) matches the CPU GEMM: transposes, batches, broadcasts") {
  if (!testing::gpu_or_skip("matmul on the GPU")) return;
  Generator g = testing::fresh_generator();
  struct Case {
    Shape a, b;
    bool ta, tb;
  };
  const std::vector<Case> cases = {
      {{64, 784}, {784, 256}, false, false},    {{33, 17}, {17, 65}, false, false},
      {{1, 40}, {40, 1}, false, false},         {{30, 20}, {20, 10}, true, false},
      {{30, 20}, {20, 10}, false, true},        {{30, 20}, {20, 10}, true, true},
      {{5, 30, 20}, {5, 20, 10}, false, false}, {{5, 30, 20}, {20, 10}, false, false},
      {{30, 20}, {4, 20, 10}, false, true},     {{2, 3, 7, 8}, {3, 8, 9}, false, false},
      {{7, 1}, {1, 9}, false, false},
  };
  for (const Case& c : cases) {
    INFO("a " << shape_str(c.a) << (c.ta ? "^T" : "") << " b " << shape_str(c.b) << (c.tb ? "^T" : ""));
    auto make = [&](Shape s, bool t) {
      if (!t) return randn(s, &g);
      std::swap(s[s.size() - 1], s[s.size() - 2]);
      return randn(s, &g).transpose(-1, -2);
    };
    const Tensor a = make(c.a, c.ta), b = make(c.b, c.tb);
    CHECK(rel_error(matmul(a.to(kGpu), b.to(kGpu)), matmul(a, b)) <= 1e-5);
  }
  // A view with no unit stride (every other column) is copied before cuBLAS sees it.
  const Tensor wide = randn({40, 60}, &g), w = randn({30, 11}, &g);
  CHECK(rel_error(matmul(wide.to(kGpu).slice(1, 0, 60, 2), w.to(kGpu)), matmul(wide.slice(1, 0, 60, 2), w)) <= 1e-5);
}

TEST_CASE("bfloat16 and float16 on the GPU: conversions give the CPU's bits, fills, widening") {
  if (!testing::gpu_or_skip("16-bit tensors on the GPU")) return;
  // Random bit patterns (every exponent, subnormals, NaNs) plus named edges.
  std::mt19937 rng(3);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> x(10007);
  for (float& v : x) v = bits_float(any(rng));
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = 1e-41f, x[4] = 1.00390625f, x[5] = -0.0f, x[6] = 65520;
  const Tensor t = from_vector(x);
  for (DType h : {DType::BFloat16, DType::Float16}) {
    INFO(dtype_name(h));
    const Tensor on_gpu = t.to(kGpu).to(h);
    REQUIRE(on_gpu.dtype() == h);
    const Tensor got = on_gpu.to(Device::cpu()), want = t.to(h);
    const auto* g16 = reinterpret_cast<const uint16_t*>(got.bytes());
    const auto* w16 = reinterpret_cast<const uint16_t*>(want.bytes());
    for (size_t i = 0; i < x.size(); ++i) {
      INFO("value " << x[i] << " at " << i);
      REQUIRE(g16[i] == w16[i]);  // the same rounding code on both sides (tensor/half.h)
    }
    // Widening on the GPU is exact, as on the CPU (infinities included).
    const std::vector<float> wide = on_gpu.to(DType::Float32).to(Device::cpu()).to_vector<float>(),
                             wide_cpu = want.to(DType::Float32).to_vector<float>();
    for (size_t i = 0; i < x.size(); ++i)
      REQUIRE((wide[i] == wide_cpu[i] || (std::isnan(wide[i]) && std::isnan(wide_cpu[i]))));
    CHECK(rel_error(full({3, 5}, 1.5, h, kGpu), full({3, 5}, 1.5, h)) == 0);
    CHECK(rel_error(zeros({4}, h, kGpu).to(DType::Float32), zeros({4})) == 0);
  }
}

TEST_CASE("bfloat16 and float16 matmul on the GPU: tensor cores, float32 sums, rounded once or kept") {
  if (!testing::gpu_or_skip("16-bit matmul on the GPU")) return;
  Generator g = testing::fresh_generator();
  struct Case {
    Shape a, b;
    bool tb;
  };
  const std::vector<Case> cases = {{{64, 784}, {784, 256}, false},
                                   {{33, 17}, {17, 65}, false},
                                   {{30, 20}, {20, 10}, true},
                                   {{5, 30, 20}, {5, 20, 10}, false}};
  for (DType h : {DType::BFloat16, DType::Float16}) {
    for (const Case& c : cases) {
      INFO(dtype_name(h) << " a " << shape_str(c.a) << " b " << shape_str(c.b) << (c.tb ? "^T" : ""));
      Shape bs = c.b;
      if (c.tb) std::swap(bs[bs.size() - 1], bs[bs.size() - 2]);
      const Tensor a = randn(c.a, &g).to(h), b0 = randn(bs, &g).to(h);
      const Tensor b = c.tb ? b0.transpose(-1, -2) : b0;
      // Products of 16-bit values are exact in float32: the reference is the float32
      // product of the widened operands, which the GPU's float32 sums match to 1e-5...
      const Tensor exact = matmul(a.to(DType::Float32), b.to(DType::Float32));
      const Tensor into = empty(exact.shape(), DType::Float32, kGpu);
      matmul(a.to(kGpu), b.to(kGpu), into);
      CHECK(rel_error(into, exact) <= 1e-5);
      // ...and, rounded once to 16 bits, to half a unit in the last place (2^-9 for
      // bfloat16's 8 bits, 2^-12 for float16's 11).
      const Tensor rounded = matmul(a.to(kGpu), b.to(kGpu));
      REQUIRE(rounded.dtype() == h);
      CHECK(rel_error(rounded, exact) <= (h == DType::BFloat16 ? 0x1p-9 : 0x1p-12) + 1e-5);
    }
  }
}

TEST_CASE("the teaching tiled GEMM kernel matches the CPU GEMM at awkward sizes") {
  if (!testing::gpu_or_skip("tiled GEMM kernel")) return;
  Generator g = testing::fresh_generator();
  for (auto [M, N, K] : std::vector<std::array<int64_t, 3>>{{1, 1, 1}, {31, 33, 65}, {64, 256, 784}, {100, 7, 3}}) {
    INFO("M " << M << " N " << N << " K " << K);
    const Tensor a = randn({M, K}, &g), b = randn({K, N}, &g);
    const Tensor ag = a.to(kGpu), bg = b.to(kGpu);
    Tensor c = empty({M, N}, DType::Float32, kGpu);
    cuda::tiled_gemm(0, M, N, K, ag.data<float>(), bg.data<float>(), c.data<float>());
    CHECK(rel_error(c, matmul(a, b)) <= 1e-5);
  }
}

TEST_CASE("random numbers on the GPU have the right distribution and are reproducible") {
  if (!testing::gpu_or_skip("GPU random numbers")) return;
  Generator g1(7), g2(7);
  const Tensor u = rand({1 << 20}, &g1, kGpu), u2 = rand({1 << 20}, &g2, kGpu);
  CHECK(rel_error(u, u2) == 0);  // same seed, same numbers
  // Uniform [0,1): mean 1/2, variance 1/12; the standard error of the mean is ~3e-4.
  CHECK(std::fabs(mean(u).item() - 0.5) < 3e-3);
  CHECK(std::fabs(var(u).item() - 1.0 / 12) < 3e-3);
  CHECK(min(u).item() >= 0);
  CHECK(max(u).item() < 1);
  const Tensor z = randn({1 << 20}, &g1, kGpu);
  CHECK(std::fabs(mean(z).item()) < 5e-3);
  CHECK(std::fabs(var(z).item() - 1) < 1e-2);
  CHECK(rel_error(rand({1 << 10}, &g1, kGpu), u.narrow(0, 0, 1 << 10)) > 0.1);  // the generator moved on
}

TEST_CASE("the caching allocator: a repeated workload makes no cudaMalloc after warm-up") {
  if (!testing::gpu_or_skip("caching allocator")) return;
  Generator g = testing::fresh_generator();
  const Tensor w = randn({256, 784}, &g).to(kGpu), x = randn({64, 784}, &g).to(kGpu);
  auto step = [&] { return sum(relu(matmul(x, w.transpose(0, 1))) * 2.0).item(); };
  step();
  const cuda::MemoryStats before = cuda::memory_stats(0);
  for (int i = 0; i < 10; ++i) step();
  const cuda::MemoryStats after = cuda::memory_stats(0);
  CHECK(after.cuda_mallocs == before.cuda_mallocs);
  CHECK(after.allocated == before.allocated);  // nothing leaked
  CHECK(after.peak_allocated >= after.allocated);
  CHECK(after.cached >= after.allocated);
}

TEST_CASE("the caching allocator's size classes waste at most a quarter of a block") {
  CHECK(cuda::allocation_size(1) == 512);
  CHECK(cuda::allocation_size(513) == 1024);
  CHECK(cuda::allocation_size(5000) == 5120);  // 4096 <= n < 8192: steps of 1024
  for (size_t n = 4097; n < (size_t(1) << 30); n = n * 3 + 7) {
    const size_t s = cuda::allocation_size(n);
    INFO("request " << n << " served with " << s);
    CHECK(s >= n);
    CHECK(double(s - n) <= 0.25 * double(s));
    CHECK(cuda::allocation_size(s) == s);  // a class is its own class
  }
}
