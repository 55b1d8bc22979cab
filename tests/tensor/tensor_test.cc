// Tensor basics: creation, views sharing storage, copies, element access, printing, errors.
#include <algorithm>
#include <limits>
#include <sstream>
#include <thread>

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tensor/tensor.h"

using namespace engine;
using V = std::vector<float>;

TEST_CASE("creation functions fill shape, dtype and values") {
  Tensor z = zeros({2, 3});
  REQUIRE(z.shape() == Shape{2, 3});
  REQUIRE(z.strides() == Strides{3, 1});
  REQUIRE(z.dtype() == DType::Float32);
  REQUIRE(z.device() == Device::cpu());
  REQUIRE(z.to_vector<float>() == V(6, 0.0f));
  REQUIRE(ones({2}).to_vector<float>() == V{1, 1});
  REQUIRE(full({3}, 2.5).to_vector<float>() == V{2.5, 2.5, 2.5});
  REQUIRE(arange(0, 5).to_vector<float>() == V{0, 1, 2, 3, 4});
  REQUIRE(arange(1, 2, 0.25).to_vector<float>() == V{1, 1.25, 1.5, 1.75});
  REQUIRE(arange(0, 3, 1, DType::Int64).to_vector<int64_t>() == std::vector<int64_t>{0, 1, 2});
  REQUIRE(tensor({1, 2, 3}).shape() == Shape{3});
  REQUIRE(from_vector(V{1, 2, 3, 4, 5, 6}, {2, 3}).at({1, 2}) == 6);
  REQUIRE(scalar_tensor(4).dim() == 0);
  REQUIRE(scalar_tensor(4).item() == 4);
  REQUIRE(empty({0, 3}).numel() == 0);
}

TEST_CASE("threads share the default generator: each draw is one whole stretch of its sequence") {
  // As PyTorch's default generator, ours is one per process and locked per draw: two
  // threads' rand() calls take two consecutive stretches of the seed's sequence, in either
  // order. Unlocked, their draws interleave (and race on its state: ThreadSanitizer names it).
  const int64_t n = 200000;
  manual_seed(5);
  std::vector<float> a, b;
  std::thread t([&] { a = rand({n}).to_vector<float>(); });
  b = rand({n}).to_vector<float>();
  t.join();
  Generator g(5);
  const std::vector<float> first = rand({n}, &g).to_vector<float>(), second = rand({n}, &g).to_vector<float>();
  REQUIRE(((a == first && b == second) || (a == second && b == first)));
}

TEST_CASE("random creation is seedable and in range") {
  Generator g1(7), g2(7), g3(8);
  REQUIRE(randn({100}, &g1).to_vector<float>() == randn({100}, &g2).to_vector<float>());
  REQUIRE(randn({100}, &g1).to_vector<float>() != randn({100}, &g3).to_vector<float>());
  const auto u = rand({10000}, &g1).to_vector<float>();
  for (float x : u) REQUIRE((x >= 0 && x < 1));
  const auto n = randn({20000}, &g1);
  REQUIRE(mean(n).item() == Approx(0).margin(0.03));
  REQUIRE(var(n).item() == Approx(1).margin(0.05));
  const auto k = randint(-2, 3, {5000}, &g1);
  REQUIRE(k.dtype() == DType::Int64);
  REQUIRE(min(k).item() == -2);
  REQUIRE(max(k).item() == 2);
  // The widest range: high - low passes int64, and is taken in unsigned arithmetic (UBSan,
  // in the sanitizer build, stops on a signed overflow here). Both signs turn up.
  Generator wide(11);
  const auto all = randint(std::numeric_limits<int64_t>::min(), std::numeric_limits<int64_t>::max(), {64}, &wide)
                       .to_vector<int64_t>();
  REQUIRE(std::count_if(all.begin(), all.end(), [](int64_t v) { return v < 0; }) > 8);
  REQUIRE(std::count_if(all.begin(), all.end(), [](int64_t v) { return v > 0; }) > 8);
  REQUIRE(Generator(3).randint(std::numeric_limits<int64_t>::max() - 1, std::numeric_limits<int64_t>::max()) ==
          std::numeric_limits<int64_t>::max() - 1);
  manual_seed(3);
  const auto a = randn({4}).to_vector<float>();
  manual_seed(3);
  REQUIRE(randn({4}).to_vector<float>() == a);
  // The generator's state can be saved and restored exactly.
  Generator g(5);
  g.normal();
  const auto state = g.get_state();
  const float next = g.normal();
  g.normal();
  g.set_state(state);
  REQUIRE(g.normal() == next);
}

TEST_CASE("views share storage and never copy") {
  Tensor a = arange(0, 6).reshape({2, 3});
  REQUIRE(a.is_contiguous());
  Tensor t = a.transpose(0, 1);
  REQUIRE(t.shape() == Shape{3, 2});
  REQUIRE(t.strides() == Strides{1, 3});
  REQUIRE_FALSE(t.is_contiguous());
  REQUIRE(t.storage() == a.storage());
  REQUIRE(t.to_vector<float>() == V{0, 3, 1, 4, 2, 5});

  Tensor row = a.select(0, 1);
  row.fill_(7);  // writes through to a
  REQUIRE(a.to_vector<float>() == V{0, 1, 2, 7, 7, 7});
  REQUIRE(a.select(1, -1).to_vector<float>() == V{2, 7});

  Tensor p = arange(0, 24).reshape({2, 3, 4}).permute({2, 0, 1});
  REQUIRE(p.shape() == Shape{4, 2, 3});
  REQUIRE(p.at({1, 1, 2}) == 12 + 8 + 1);

  Tensor n = arange(0, 10).narrow(0, 2, 3);
  REQUIRE(n.to_vector<float>() == V{2, 3, 4});
  REQUIRE(arange(0, 10).slice(0, 1, 8, 3).to_vector<float>() == V{1, 4, 7});
  REQUIRE(arange(0, 10).slice(0, -3, 100).to_vector<float>() == V{7, 8, 9});

  Tensor e = tensor({1, 2, 3}).unsqueeze(0).expand({2, 3});
  REQUIRE(e.strides() == Strides{0, 1});
  REQUIRE(e.to_vector<float>() == V{1, 2, 3, 1, 2, 3});
  REQUIRE(tensor({1, 2}).reshape({2, 1}).expand({2, 3}).to_vector<float>() == V{1, 1, 1, 2, 2, 2});
  REQUIRE(zeros({1, 3, 1}).squeeze().shape() == Shape{3});
  REQUIRE(zeros({1, 3, 1}).squeeze(-1).shape() == Shape{1, 3});
  REQUIRE(zeros({1, 3, 1}).squeeze(1).shape() == Shape{1, 3, 1});
  REQUIRE(zeros({3}).unsqueeze(1).shape() == Shape{3, 1});
  REQUIRE(zeros({2, 3, 4}).view({-1, 4}).shape() == Shape{6, 4});
}

TEST_CASE("reshape views when strides allow, copies otherwise; view refuses") {
  Tensor a = arange(0, 12).reshape({3, 4});
  REQUIRE(a.reshape({2, 6}).storage() == a.storage());
  Tensor t = a.transpose(0, 1);  // (4,3), not contiguous
  REQUIRE_THROWS_WITH(t.view({12}), Catch::Contains("[view] cannot view"));
  Tensor r = t.reshape({12});
  REQUIRE(r.storage() != a.storage());
  REQUIRE(r.to_vector<float>() == V{0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11});
  // A slice of contiguous rows still views.
  REQUIRE(arange(0, 24).reshape({4, 6}).narrow(0, 1, 2).view({12}).to_vector<float>()[0] == 6);
  REQUIRE_THROWS_WITH(a.reshape({5, 2}), Catch::Contains("[reshape] shape (5,2) has 10 elements"));
}

TEST_CASE("contiguous, clone, copy_ and dtype conversion") {
  Tensor a = arange(0, 6).reshape({2, 3});
  Tensor t = a.transpose(0, 1).contiguous();
  REQUIRE(t.is_contiguous());
  REQUIRE(t.to_vector<float>() == V{0, 3, 1, 4, 2, 5});
  REQUIRE(a.contiguous().storage() == a.storage());
  REQUIRE(a.clone().storage() != a.storage());
  Tensor dst = zeros({2, 3});
  dst.copy_(tensor({1, 2, 3}));  // broadcast
  REQUIRE(dst.to_vector<float>() == V{1, 2, 3, 1, 2, 3});
  Tensor i = tensor({1.7f, -2.2f}).to(DType::Int64);
  REQUIRE(i.to_vector<int64_t>() == std::vector<int64_t>{1, -2});
  REQUIRE_THROWS_WITH(zeros({2}).copy_(zeros({3})), Catch::Contains("[copy_]"));
}

TEST_CASE("bad input names the op and the shapes") {
  REQUIRE_THROWS_WITH(zeros({2, 3}).transpose(0, 2), Catch::Contains("[transpose] dim 2 is out of range"));
  REQUIRE_THROWS_WITH(zeros({2, 3}).narrow(1, 2, 2),
                      Catch::Contains("[narrow] start 2 and length 2 do not fit in dim 1 of size 3"));
  REQUIRE_THROWS_WITH(zeros({2, 3}).expand({4, 3, 2}), Catch::Contains("[expand] cannot expand shape (2,3)"));
  // -1 keeps an existing dim's size; a new leading dim has none (PyTorch refuses it too).
  REQUIRE(zeros({1, 3}).expand({2, -1, -1}).shape() == Shape{2, 1, 3});
  REQUIRE_THROWS_WITH(
      zeros({3}).expand({-1, 3}),
      Catch::Contains("[expand] cannot expand shape (3,) to (-1,3): size -1 in dim 0 (a new leading dim"));
  REQUIRE_THROWS_WITH(zeros({1}).expand({-2}),
                      Catch::Contains("size -2 in dim 0 (only -1, keep the size, is allowed)"));
  REQUIRE_THROWS_WITH(zeros({2}).permute({0, 0}), Catch::Contains("[permute]"));
  REQUIRE_THROWS_WITH(zeros({2, 2}).item(), Catch::Contains("[item] needs a tensor with one element, got shape (2,2)"));
  REQUIRE_THROWS_WITH(zeros({2}).data<int64_t>(), Catch::Contains("holds float32, asked for int64"));
  REQUIRE_THROWS_WITH(from_vector(V{1, 2, 3}, {2, 2}), Catch::Contains("3 values do not fill shape (2,2)"));
  REQUIRE_THROWS_WITH(empty({-1}), Catch::Contains("[empty] negative size"));
  REQUIRE_THROWS_WITH(Device::parse("gpu0"), Catch::Contains("cannot parse device \"gpu0\""));
  REQUIRE(Device::parse("cuda:3") == Device::cuda(3));
}

TEST_CASE("a shape with more elements than int64 counts is an error, never a wrapped count") {
  const int64_t big = int64_t(1) << 40, also_big = int64_t(1) << 30;  // 2^70 elements
  REQUIRE_THROWS_WITH(zeros({big, also_big}), Catch::Contains("[numel] shape (1099511627776,1073741824) has more"));
  REQUIRE_THROWS_WITH(numel({also_big, also_big, 16}), Catch::Contains("more elements than int64 can count"));
  // 2^62 float32 elements fit int64 but their bytes do not.
  REQUIRE_THROWS_WITH(empty({int64_t(1) << 62}), Catch::Contains("[empty] shape (4611686018427387904,) of float32"));
  REQUIRE_THROWS_WITH(zeros({1, 1}).expand({big, also_big}), Catch::Contains("[numel]"));  // no view of it either
  REQUIRE_THROWS_WITH(zeros({6}).reshape({big, also_big, -1}), Catch::Contains("[reshape] shape"));
  // A 0 makes the count 0, but the other sizes must still multiply within int64 (so that
  // strides and other products of sizes never overflow).
  REQUIRE(numel({big, 0, 1024}) == 0);
  REQUIRE(zeros({big, 0, 1024}).numel() == 0);
  REQUIRE(zeros({0}).reshape({big, 1024, 0}).numel() == 0);
  REQUIRE_THROWS_WITH(zeros({big, 0, also_big}), Catch::Contains("[numel] shape (1099511627776,0,1073741824)"));
  REQUIRE_THROWS_WITH(zeros({0}).reshape({big, also_big, 0}), Catch::Contains("[reshape] shape"));
  // The edge: 3037000499^2 fits int64, 3037000500^2 does not.
  REQUIRE(numel({3037000499, 3037000499}) == int64_t(9223372030926249001));
  REQUIRE_THROWS_WITH(numel({3037000500, 3037000500}), Catch::Contains("[numel]"));
}

TEST_CASE("views stay inside their storage: no index arithmetic wraps past int64") {
  const int64_t big = std::numeric_limits<int64_t>::max(), small = std::numeric_limits<int64_t>::min();
  // start + length would wrap to a negative number and pass a naive bound.
  REQUIRE_THROWS_WITH(zeros({4}).narrow(0, big, 2), Catch::Contains("[narrow] start 9223372036854775807"));
  REQUIRE_THROWS_WITH(zeros({4}).narrow(0, 3, big), Catch::Contains("[narrow]"));
  REQUIRE(arange(0, 4).narrow(0, 4, 0).numel() == 0);  // an empty view at the end is fine
  // A step past the dim's size takes the first element only (ceil(4 / step) = 1).
  REQUIRE(arange(0, 4).slice(0, 0, big, big).to_vector<float>() == V{0});
  REQUIRE(arange(0, 4).slice(0, 1, big, 3).to_vector<float>() == V{1});
  REQUIRE(arange(0, 4).slice(0, small, big, 2).to_vector<float>() == V{0, 2});
  REQUIRE(arange(0, 4).slice(0, 3, 1).numel() == 0);
  // Whatever builds a view, the constructor checks the elements it can reach.
  const Tensor base = arange(0, 4);
  REQUIRE(Tensor(base.storage(), {2}, {1}, 2, DType::Float32).to_vector<float>() == V{2, 3});
  REQUIRE_THROWS_WITH(Tensor(base.storage(), {2}, {1}, 3, DType::Float32),
                      Catch::Contains("[view] shape (2,) with strides (1,) at offset 3 reaches past its storage of 4"));
  REQUIRE_THROWS_WITH(Tensor(base.storage(), {3}, {big}, 0, DType::Float32), Catch::Contains("[view]"));
  REQUIRE_THROWS_WITH(Tensor(base.storage(), {1}, {1}, -1, DType::Float32), Catch::Contains("[view]"));
  REQUIRE_THROWS_WITH(Tensor(base.storage(), {2}, {1}, 1, DType::Int64), Catch::Contains("of 2 int64 elements"));
  REQUIRE(Tensor(base.storage(), {0, 5}, {9, 9}, 7, DType::Float32).numel() == 0);  // reaches nothing
}

TEST_CASE("in-place writes: never into an expanded view; a source overlapping its destination is read first") {
  Tensor expanded = zeros({1, 3}).expand({2, 3});
  REQUIRE_THROWS_WITH(expanded.copy_(arange(0, 6).reshape({2, 3})),
                      Catch::Contains("[copy_] cannot write in place into shape (2,3) with strides (0,1)"));
  REQUIRE_THROWS_WITH(add_(expanded, ones({2, 3})), Catch::Contains("[add_] cannot write in place"));
  REQUIRE_THROWS_WITH(mul_(expanded, 2), Catch::Contains("[mul_] cannot write in place"));
  REQUIRE(expanded.fill_(5).to_vector<float>() == V{5, 5, 5, 5, 5, 5});  // one value: well defined, as in PyTorch
  // Shift each row right by one through strided views of one storage: the result is the
  // one a copy through a temporary gives, whichever order the loop runs in.
  Tensor t = arange(0, 8).reshape({2, 4});
  t.slice(1, 1, 4).copy_(t.slice(1, 0, 3));
  REQUIRE(t.to_vector<float>() == V{0, 0, 1, 2, 4, 4, 5, 6});
  Tensor u = arange(0, 8).reshape({2, 4});
  u.slice(1, 0, 3).copy_(u.slice(1, 1, 4));
  REQUIRE(u.to_vector<float>() == V{1, 2, 3, 3, 5, 6, 7, 7});
  Tensor c = arange(0, 6);  // contiguous and shifted: the same values
  c.narrow(0, 1, 5).copy_(c.narrow(0, 0, 5));
  REQUIRE(c.to_vector<float>() == V{0, 0, 1, 2, 3, 4});
  Tensor w = arange(0, 4).reshape({2, 2});
  w.copy_(w.transpose(0, 1));  // a transpose in place
  REQUIRE(w.to_vector<float>() == V{0, 2, 1, 3});
  // add_ the same way: a[1:] += a[:-1] adds the old values (not a running sum), for a short
  // tensor and one long enough for the vector loops; a row added to every row of its own
  // tensor; a += a (the same view) doubles.
  for (int64_t n : {int64_t(6), int64_t(1000)}) {
    Tensor x = arange(0, double(n));
    Tensor tail = x.narrow(0, 1, n - 1);
    add_(tail, x.narrow(0, 0, n - 1));
    const std::vector<float> v = x.to_vector<float>();
    for (int64_t i = 1; i < n; ++i) REQUIRE(v[size_t(i)] == float(2 * i - 1));
  }
  Tensor m = arange(1, 7).reshape({2, 3});
  add_(m, m.select(0, 0), 10);
  REQUIRE(m.to_vector<float>() == V{11, 22, 33, 14, 25, 36});
  Tensor d = arange(0, 4);
  add_(d, d);
  REQUIRE(d.to_vector<float>() == V{0, 2, 4, 6});
}

TEST_CASE("share_memory: views of one storage whose bytes meet; same_view: the very same view") {
  Tensor t = arange(0, 12).reshape({3, 4});
  REQUIRE(share_memory(t, t));
  REQUIRE(share_memory(t, t.select(0, 1)));
  REQUIRE(share_memory(t.narrow(1, 0, 2), t.narrow(1, 2, 2)));  // interleaved rows: counted as sharing
  REQUIRE_FALSE(share_memory(t.select(0, 0), t.select(0, 1)));  // rows apart
  REQUIRE(share_memory(t.select(0, 0), t.transpose(0, 1).select(1, 0)));
  REQUIRE_FALSE(share_memory(t, t.clone()));
  REQUIRE_FALSE(share_memory(t.narrow(0, 0, 0), t));  // empty: no byte
  REQUIRE(same_view(t, t.view({3, 4})));
  REQUIRE_FALSE(same_view(t, t.transpose(0, 1).transpose(0, 1).narrow(0, 1, 2)));
  REQUIRE_FALSE(same_view(t.select(0, 0), t.select(0, 1)));
}

TEST_CASE("printing shows values, shape, dtype and device, elided when large") {
  std::ostringstream s;
  s << arange(0, 6).reshape({2, 3});
  REQUIRE(s.str() ==
          "tensor([[0.0000, 1.0000, 2.0000],\n"
          "        [3.0000, 4.0000, 5.0000]], shape=(2,3), dtype=float32, device=cpu)");
  std::ostringstream i;
  i << arange(-1, 2, 1, DType::Int64);
  REQUIRE(i.str() == "tensor([-1,  0,  1], shape=(3,), dtype=int64, device=cpu)");
  std::ostringstream big;
  big << arange(0, 2000);
  REQUIRE(big.str().find("...") != std::string::npos);
  REQUIRE(big.str().find("1999.0000") != std::string::npos);
  REQUIRE(big.str().find("1000.0000") == std::string::npos);
  std::ostringstream sc;
  sc << scalar_tensor(2);
  REQUIRE(sc.str() == "tensor(2.0000, shape=(), dtype=float32, device=cpu)");
  std::ostringstream n;  // 0/0 sets the NaN's sign bit on x86; PyTorch prints "nan" either way
  n << zeros({1}) / zeros({1});
  REQUIRE(n.str() == "tensor([nan], shape=(1,), dtype=float32, device=cpu)");
  // A nan or inf does not stop a wide range from printing in scientific notation (torch:
  // tensor([1.0000e-30, 1.0000e+30, nan, inf])).
  std::ostringstream wide;
  wide << tensor({1e-30f, 1e30f, NAN, INFINITY, 1.5f});
  REQUIRE(wide.str() ==
          "tensor([1.0000e-30, 1.0000e+30,        nan,        inf, 1.5000e+00], shape=(5,), "
          "dtype=float32, device=cpu)");
  std::ostringstream e;
  e << zeros({0, 2});
  REQUIRE(e.str() == "tensor([], shape=(0,2), dtype=float32, device=cpu)");
}
