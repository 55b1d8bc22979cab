// bfloat16 and float16: rounding to nearest even checked against the definition for every
// 16-bit value and random floats, PyTorch's bits for named values, ops computed in float32
// and rounded once, sums that accumulate in float32, printing, and the errors.
#include <cmath>
#include <random>

#include "catch2/catch.hpp"
#include "tensor/half.h"
#include "tensor/ops.h"

using namespace engine;

namespace {
// The float32 value of every finite 16-bit pattern, sorted: the grid rounding must land on.
template <class H>
std::vector<float> grid() {
  std::vector<float> g;
  for (uint32_t b = 0; b < 65536; ++b) {
    const float f = H::from_bits(uint16_t(b));
    if (std::isfinite(f)) g.push_back(f);
  }
  std::sort(g.begin(), g.end());
  g.erase(std::unique(g.begin(), g.end()), g.end());  // +0 and -0 compare equal
  return g;
}

// What rounding x to nearest, ties to even, on `g` must give (x within the grid's range).
template <class H>
float nearest_even(const std::vector<float>& g, float x) {
  auto hi = std::lower_bound(g.begin(), g.end(), x);
  if (*hi == x) return x;
  const float up = *hi, down = *(hi - 1);
  const double du = double(up) - x, dd = double(x) - down;
  if (du != dd) return du < dd ? up : down;
  return (H(up).bits & 1) == 0 ? up : down;  // a tie: the one with an even last bit
}
}  // namespace

TEST_CASE("every 16-bit value survives widening and rounding back") {
  for (uint32_t b = 0; b < 65536; ++b) {
    const float fb = bfloat16::from_bits(uint16_t(b)), fh = float16::from_bits(uint16_t(b));
    if (!std::isnan(fb)) REQUIRE(bfloat16(fb).bits == b);
    if (!std::isnan(fh)) REQUIRE(float16(fh).bits == b);
    REQUIRE(std::isnan(fb) == std::isnan(float(bfloat16(fb))));
    REQUIRE(std::isnan(fh) == std::isnan(float(float16(fh))));
  }
}

TEST_CASE("rounding is to the nearest value, ties to even (random floats and exact ties)") {
  const std::vector<float> gb = grid<bfloat16>(), gh = grid<float16>();
  std::mt19937 rng(5);
  std::uniform_real_distribution<float> mant(-1, 1);
  std::uniform_int_distribution<int> ex(-30, 15);
  for (int i = 0; i < 200000; ++i) {
    const float x = std::ldexp(mant(rng), ex(rng));
    REQUIRE(float(bfloat16(x)) == nearest_even<bfloat16>(gb, x));
    if (std::fabs(x) < 65504) REQUIRE(float(float16(x)) == nearest_even<float16>(gh, x));
  }
  // Exact midpoints between neighbours go to the even one.
  for (size_t k = 1000; k + 1 < gh.size(); k += 97) {
    const float mid = float((double(gh[k]) + gh[k + 1]) / 2);
    REQUIRE(float(float16(mid)) == nearest_even<float16>(gh, mid));
  }
}

TEST_CASE("dense conversions (vectorised where the CPU allows) give the scalar rule's bits") {
  // Random floats over the whole range, with Inf, NaN, subnormals and exact ties mixed in,
  // through Tensor::to (16 at a time with AVX-512, the tail one by one).
  std::mt19937 rng(9);
  std::uniform_int_distribution<uint32_t> any;
  std::vector<float> x(100003);
  for (float& v : x) v = bits_float(any(rng));
  x[0] = INFINITY, x[1] = -INFINITY, x[2] = NAN, x[3] = 1e-41f, x[4] = 1.00390625f, x[5] = -0.0f, x[6] = 65520;
  const Tensor t = from_vector(x);
  for (DType h : {DType::BFloat16, DType::Float16}) {
    const Tensor c = t.to(h);
    const uint16_t* got = reinterpret_cast<const uint16_t*>(c.bytes());
    for (size_t i = 0; i < x.size(); ++i) {
      const uint16_t want = h == DType::BFloat16 ? bfloat16(x[i]).bits : float16(x[i]).bits;
      INFO(dtype_name(h) << " at " << i << ": " << x[i]);
      REQUIRE(got[i] == want);  // NaNs too: the same bits wherever an element falls (vector or tail, CPU or GPU)
    }
    // And back: widening is exact.
    const std::vector<float> back = c.to(DType::Float32).to_vector<float>();
    for (size_t i = 0; i < x.size(); i += 7) {
      const float want = h == DType::BFloat16 ? float(bfloat16(x[i])) : float(float16(x[i]));
      if (!std::isnan(want)) REQUIRE(back[i] == want);
    }
  }
}

TEST_CASE("bits match PyTorch's for named values") {
  // Printed by PyTorch 1.13 here: torch.tensor([x]).bfloat16() / .half(), viewed as int16.
  struct Case {
    float x;
    uint16_t bf16, fp16;
  };
  const Case cases[] = {{1.0f / 3, 0x3eab, 0x3555},    {1.0f, 0x3f80, 0x3c00},       {-2.5f, 0xc020, 0xc100},
                        {3.4e38f, 0x7f80, 0x7c00},     {1e-40f, 0x0001, 0x0000},     {INFINITY, 0x7f80, 0x7c00},
                        {65504, 0x4780, 0x7bff},       {65519, 0x4780, 0x7bff},      {65520, 0x4780, 0x7c00},
                        {1e-5f, 0x3728, 0x00a8},       {6e-8f, 0x3381, 0x0001},      {2.9e-8f, 0x32f9, 0x0000},
                        {1.00390625f, 0x3f80, 0x3c04}, {1.01171875f, 0x3f82, 0x3c0c}};
  for (const Case& c : cases) {
    CAPTURE(c.x);
    REQUIRE(bfloat16(c.x).bits == c.bf16);
    REQUIRE(float16(c.x).bits == c.fp16);
  }
  REQUIRE(std::isnan(float(bfloat16(NAN))));
  REQUIRE(std::isnan(float(float16(NAN))));
  REQUIRE(float16(-0.0f).bits == 0x8000);
  // Every float16 NaN is PyTorch's one quiet pattern with its sign, whatever the payload
  // (torch.tensor([...]).view(torch.float32).half(): 0x7e00, 0xfe00), 16 at a time too.
  const std::vector<float> nans(35, bits_float(0xff81a000u));
  const Tensor h = from_vector(nans).to(DType::Float16);
  for (int64_t i = 0; i < h.numel(); ++i) REQUIRE(reinterpret_cast<const uint16_t*>(h.bytes())[i] == 0xfe00);
  REQUIRE(float16(bits_float(0x7f801234u)).bits == 0x7e00);
}

TEST_CASE("tensors convert, compute in float32 and round once") {
  Tensor x = from_vector(std::vector<float>{1.0f / 3, 100.5f, -7e-3f, 70000});
  for (DType h : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(h));
    Tensor t = x.to(h);
    REQUIRE(t.dtype() == h);
    REQUIRE(t.nbytes() == 8);
    // Each op equals: widen, compute in float32, round the result once.
    const Tensor w = t.to(DType::Float32);
    auto same = [&](const Tensor& got, const Tensor& want) {
      REQUIRE(got.dtype() == h);
      const auto g = got.to(DType::Float32).to_vector<float>(), e = want.to(h).to(DType::Float32).to_vector<float>();
      for (size_t i = 0; i < g.size(); ++i)
        if (!(std::isnan(g[i]) && std::isnan(e[i]))) REQUIRE(g[i] == e[i]);
    };
    same(t * t, w * w);
    same(t + 1.0, w + 1.0);
    same(exp(t), exp(w));
    same(relu(neg(t)), relu(neg(w)));
    same(sum(t), sum(w));
    same(max(t), max(w));
    REQUIRE(argmax(t).item() == argmax(w).item());
    REQUIRE(lt(t, zeros({}, h)).dtype() == DType::Float32);  // comparisons give float32 masks
    Tensor acc = t.clone();
    add_(acc, t, 2.0);
    same(acc, w + w * 2.0);
  }
  // float16 overflows where bfloat16 does not: 70000 > 65504.
  REQUIRE(std::isinf(x.to(DType::Float16).at({3})));
  REQUIRE(x.to(DType::BFloat16).at({3}) == 70144);
}

TEST_CASE("16-bit matmul: float32 sums of the exact products, rounded once; a transposed operand read in place") {
  Generator gen(4);
  const Tensor a = randn({5, 7}, &gen), b_rows = randn({6, 7}, &gen);
  for (DType h : {DType::BFloat16, DType::Float16}) {
    CAPTURE(dtype_name(h));
    const Tensor a16 = a.to(h), b16 = b_rows.to(h).transpose(0, 1);  // (7, 6): a layer's weight as linear uses it
    REQUIRE_FALSE(b16.is_contiguous());
    const Tensor want = matmul(a16.to(DType::Float32), b16.to(DType::Float32));  // the float32 GEMM, widened
    const Tensor got = matmul(a16, b16);
    REQUIRE(got.dtype() == h);
    Tensor into = empty({5, 6});
    matmul(a16, b16, into);  // into float32: the sums themselves
    const auto g = got.to(DType::Float32).to_vector<float>(), f = into.to_vector<float>(), w = want.to_vector<float>();
    const float step = h == DType::BFloat16 ? 0x1p-8f : 0x1p-11f;  // half a 16-bit step, and room for the order
    for (size_t i = 0; i < w.size(); ++i) {
      REQUIRE(std::fabs(g[i] - w[i]) <= std::fabs(w[i]) * step + 1e-6f);
      REQUIRE(std::fabs(f[i] - w[i]) <= std::fabs(w[i]) * 1e-6f + 1e-6f);
    }
  }
}

TEST_CASE("sums of 16-bit tensors accumulate in float32") {
  // 4096 ones and then ones: in bfloat16 arithmetic 256 + 1 rounds back to 256 (8 bits of
  // significand), so a 16-bit running sum would stop at 256.
  Tensor ones16 = ones({4096}, DType::BFloat16);
  REQUIRE(sum(ones16).item() == 4096);
  REQUIRE(mean(ones16).item() == 1);
  REQUIRE(bfloat16(float(bfloat16(256.0f)) + 1.0f).bits == bfloat16(256.0f).bits);  // the loss it avoids
  REQUIRE(sum(ones({3000}, DType::Float16)).item() == 3000);
}

TEST_CASE("16-bit tensors print their dtype and round-trip through int64") {
  std::ostringstream s;
  s << from_vector(std::vector<float>{0.1f, 2}).to(DType::BFloat16);
  REQUIRE_THAT(s.str(), Catch::Contains("0.1001") && Catch::Contains("dtype=bfloat16"));
  Tensor i = arange(0, 5, 1, DType::Int64);
  REQUIRE(i.to(DType::Float16).to(DType::Int64).to_vector<int64_t>() == i.to_vector<int64_t>());
  REQUIRE(arange(0, 3, 1, DType::BFloat16).dtype() == DType::BFloat16);
}

TEST_CASE("16-bit errors name the dtypes") {
  Tensor b = ones({2, 2}, DType::BFloat16), h = ones({2, 2}, DType::Float16);
  REQUIRE_THROWS_WITH(add(b, ones({2, 2}, DType::Int64)), Catch::Contains("bfloat16") && Catch::Contains("int64"));
  REQUIRE_THROWS_WITH(matmul(b, ones({2, 2})), Catch::Contains("bfloat16 @ float32"));
  REQUIRE_THROWS_WITH(b.data<float>(), Catch::Contains("holds bfloat16"));
}

TEST_CASE("two floating dtypes meet in float32, as PyTorch promotes them") {
  // torch: bf16 + f32, f16 * f32 and bf16 + f16 are float32; a comparison is a mask.
  const Tensor b = from_vector(std::vector<float>{0.1f, 3}).to(DType::BFloat16);
  const Tensor h = from_vector(std::vector<float>{0.1f, 3}).to(DType::Float16),
               f = from_vector(std::vector<float>{1, 2});
  const Tensor bf = add(b, f), hf = mul(h, f), bh = add(b, h);
  REQUIRE(bf.dtype() == DType::Float32);
  REQUIRE(hf.dtype() == DType::Float32);
  REQUIRE(bh.dtype() == DType::Float32);
  REQUIRE(bf.to_vector<float>() == std::vector<float>{float(bfloat16(0.1f)) + 1, 5});  // the 16-bit value, widened
  REQUIRE(hf.to_vector<float>() == std::vector<float>{float(float16(0.1f)) * 1, 6});
  REQUIRE(bh.to_vector<float>() == std::vector<float>{float(bfloat16(0.1f)) + float(float16(0.1f)), 6});
  REQUIRE(lt(b, f).to_vector<float>() == std::vector<float>{1, 0});
  REQUIRE(where(gt(f, scalar_tensor(1.5)), b, f).to_vector<float>() == std::vector<float>{1, 3});
  REQUIRE(add(b, b).dtype() == DType::BFloat16);  // one dtype stays itself
}
