// The per-image convolution under 16-bit autocast (tensor/conv2d_16bit.cc) against the
// float32 one run on the same operands rounded to 16 bits: the products of 16-bit values
// are exact in float32, so both sum the same terms and differ only in the order of the
// sums; the output is that sum rounded once to 16 bits, the gradients stay float32.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

using namespace engine;

namespace {

Tensor rounded(const Tensor& t, DType half) { return t.to(half).to(DType::Float32); }

// |got - want| within rel of the larger values at stake, elementwise.
void require_close(const Tensor& got_t, const Tensor& want_t, float rel, const char* what) {
  REQUIRE(got_t.shape() == want_t.shape());
  const auto got = got_t.to(DType::Float32).to_vector<float>(), want = want_t.to_vector<float>();
  float scale = 0;
  for (float v : want) scale = std::max(scale, std::fabs(v));
  for (size_t i = 0; i < got.size(); ++i) {
    INFO(what << " element " << i << ": " << got[i] << " vs " << want[i]);
    REQUIRE(std::fabs(got[i] - want[i]) <= std::fabs(want[i]) * rel + scale * 1e-6f);
  }
}

// How many values of t are not exactly representable in `half` (0 if t was rounded to it).
int unrounded(const Tensor& t, DType half) {
  const auto wide = t.to_vector<float>(), back = rounded(t, half).to_vector<float>();
  int count = 0;
  for (size_t i = 0; i < wide.size(); ++i) count += wide[i] != back[i];
  return count;
}

struct Case {
  int64_t N, C, H, W, O, k, stride, padding;
  bool bias;
};

}  // namespace

TEST_CASE("conv2d under 16 bits: output and gradients equal float32's on the rounded operands") {
  // Depths C kh kw of 32 and more run on the bfloat16 kernels (where the CPU has one): the
  // lessons' 3x3 at stride 1 with padding (an even number of positions), a strided one with
  // an odd number (the products' slower packing), a 1x1 kernel. Shallower layers (the
  // lessons' first, depth 9) and every float16 layer run the float32 convolution on the
  // rounded operands.
  for (const DType half : {DType::BFloat16, DType::Float16})
    for (const Case& c : {Case{3, 4, 7, 8, 5, 3, 1, 1, true}, Case{2, 4, 9, 9, 4, 3, 2, 0, false},
                          Case{2, 40, 5, 5, 33, 1, 1, 0, true}, Case{2, 1, 6, 6, 3, 3, 1, 1, true}}) {
      INFO(dtype_name(half) << ", N " << c.N << " C " << c.C << " " << c.H << "x" << c.W << " O " << c.O << " k " << c.k
                            << " stride " << c.stride << " padding " << c.padding);
      Generator gen(7);
      const Tensor x = randn({c.N, c.C, c.H, c.W}, &gen), w = randn({c.O, c.C, c.k, c.k}, &gen);
      const Tensor b = c.bias ? randn({c.O}, &gen) : Tensor();
      const Tensor out = conv2d_16bit_forward(x, w, b, c.stride, c.padding, half);
      REQUIRE(out.dtype() == half);
      const Tensor want =
          conv2d_forward(rounded(x, half), rounded(w, half), c.bias ? rounded(b, half) : Tensor(), c.stride, c.padding);
      // One rounding of a sum that differs from want's only in its order: half a 16-bit
      // step (2^-9 relative in bfloat16, 2^-12 in float16), with room for the order.
      require_close(out, want, half == DType::BFloat16 ? 0x1p-8f : 0x1p-11f, "output");

      const Tensor g = randn(want.shape(), &gen).to(half);
      const Conv2dGrads got = conv2d_16bit_backward(g, x, w, c.stride, c.padding, half, true, true, c.bias);
      const Conv2dGrads ref = conv2d_backward(g.to(DType::Float32), rounded(x, half), rounded(w, half), c.stride,
                                              c.padding, true, true, c.bias);
      REQUIRE(got.dx.dtype() == DType::Float32);
      REQUIRE(got.dw.dtype() == DType::Float32);
      require_close(got.dx, ref.dx, 1e-5f, "dx");
      require_close(got.dw, ref.dw, 1e-5f, "dw");
      REQUIRE(unrounded(got.dx, half) > 0);  // float32 sums, not rounded to 16 bits on their way
      REQUIRE(unrounded(got.dw, half) > 0);
      if (c.bias) require_close(got.dbias, ref.dbias, 1e-6f, "dbias");
    }
}

TEST_CASE("conv2d under 16 bits: an empty batch, a gradient of the wrong dtype, a dtype not 16 bits") {
  Generator gen(8);
  const Tensor x = randn({0, 2, 5, 5}, &gen), w = randn({3, 2, 3, 3}, &gen);
  const Tensor out = conv2d_16bit_forward(x, w, Tensor(), 1, 1, DType::BFloat16);
  REQUIRE(out.shape() == Shape{0, 3, 5, 5});
  const Conv2dGrads d = conv2d_16bit_backward(out, x, w, 1, 1, DType::BFloat16, true, true, false);
  REQUIRE(d.dx.shape() == x.shape());
  REQUIRE(sum(d.dw * d.dw).item() == 0.0);

  const Tensor x1 = randn({1, 2, 5, 5}, &gen);
  REQUIRE_THROWS_WITH(conv2d_16bit_backward(zeros({1, 3, 5, 5}), x1, w, 1, 1, DType::Float16, true, true, false),
                      Catch::Contains("gradient of shape (1,3,5,5) and dtype float32 does not fit the float16"));
  REQUIRE_THROWS_WITH(conv2d_16bit_forward(x1, w, Tensor(), 1, 1, DType::Float32),
                      Catch::Contains("multiplies in bfloat16 or float16, got float32"));
}
