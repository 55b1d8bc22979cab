// 2-d convolution under 16-bit autocast on the CPU, one image at a time (nn_ops.h).
//
// The float32 path's plan (conv2d.cc) with 16-bit operands. For bfloat16, image n's
// columns are built in float32 while they sit in the L2 cache, rounded to bfloat16, and
// multiplied by the rounded weight with float32 sums (gemm_bf16.h):
//   out_n = bf16( W16 · cols16_n + bias16 )              one rounding, of the final sum
//   dcols_n = W16^T · g_n,  dx_n = col2im(dcols_n)       float32, never rounded
//   dW = sum_n g_n · cols16_n^T,  dbias = sum_n sum_l g_n   float32
// Where 16-bit products do not pay (below), the float32 convolution runs on the operands
// rounded to 16 bits instead: the product of two 16-bit values is exact in float32 (8 + 8
// or 11 + 11 significant bits fit its 24), so it is the same products with float32 sums.
// x stays float32: the cast to 16 bits happens inside, so dx comes back as the float32
// sums, as the weight's gradient does (PyTorch rounds both to 16 bits and widens them
// again; these are the more exact values). The whole-batch alternative (im2col of every
// image in 16 bits, one GEMM, a permuted copy) spent most of its step converting and
// copying: 0.6x the float32 step on the lessons' CNN in bfloat16, 0.37x in float16.
#include <algorithm>
#include <cstdint>
#include <vector>

#include "tensor/columns_cpu.h"
#include "tensor/conv2d_cpu.h"
#include "tensor/gemm_bf16.h"
#include "tensor/half_convert.h"
#include "tensor/nn_ops.h"

namespace engine {

namespace {

using detail::ConvGeometry;
using detail::PaddedRows;

// One image's columns, rounded to bfloat16 rows of the same layout (cols16 row r starts at
// r * cols.ld).
void columns16_of(const ConvGeometry& g, const float* image, PaddedRows& cols, std::vector<bfloat16>& cols16) {
  detail::columns_of(g, image, cols);
  detail::float_to_bf16(cols.rows, cols16.data(), g.rows * cols.ld);
}

// Where bfloat16 products run on a kernel of their own: the CPU has a fast one (else
// gemm_bf16 would widen the operands and run the float32 GEMM anyway), and the layer's
// depth C kh kw is 32 or more (the kernels pad depths to whole blocks of 32: the lessons'
// first layer, depth 9, would multiply 3.5x its terms and run at half the float32 layer's
// speed). float16 has no CPU kernel here.
bool bf16_products_pay(const ConvGeometry& g, DType half) {
  return half == DType::BFloat16 && g.rows >= 32 && bf16_kernel_outruns_float32();
}

Tensor rounded_float32(const Tensor& t, DType half) { return t.to(half).to(DType::Float32); }

void require_16bit(DType half) {
  ENGINE_REQUIRE(half == DType::BFloat16 || half == DType::Float16,
                 "[conv2d] the 16-bit path multiplies in bfloat16 or float16, got ", dtype_name(half));
}

std::vector<bfloat16> rounded(const float* v, int64_t n) {
  std::vector<bfloat16> out(static_cast<size_t>(n));
  detail::float_to_bf16(v, out.data(), n);
  return out;
}

}  // namespace

Tensor conv2d_16bit_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, int64_t stride, int64_t padding,
                            DType half) {
  require_16bit(half);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const ConvGeometry g = detail::conv_geometry(x, w, stride, padding, bias);
  if (!bf16_products_pay(g, half))
    return conv2d_forward(rounded_float32(x, half), rounded_float32(w, half),
                          bias.defined() ? rounded_float32(bias, half) : Tensor(), stride, padding)
        .to(half);
  // bfloat16 products on the bfloat16 kernel from here on.
  Tensor out = empty({g.N, g.O, g.OH, g.OW}, DType::BFloat16);
  const std::vector<bfloat16> w16 = rounded(w.data<float>(), g.O * g.rows);  // (O, rows), once
  std::vector<float> bias16;                                                 // the bias's product copy
  if (bias.defined()) {
    const Tensor b = bias.contiguous();
    for (int64_t o = 0; o < g.O; ++o) bias16.push_back(float(bfloat16(b.data<float>()[o])));
  }
  PaddedRows cols(g.rows, g.L);
  std::vector<bfloat16> cols16(size_t(g.rows * cols.ld));
  std::vector<float> sums(size_t(g.O * g.L));
  for (int64_t n = 0; n < g.N; ++n) {
    columns16_of(g, x.data<float>() + n * g.C * g.H * g.W, cols, cols16);
    gemm_bf16(g.O, g.L, g.rows, w16.data(), g.rows, 1, cols16.data(), cols.ld, 1, sums.data(), g.L, 1, false);
    for (size_t o = 0; o < bias16.size(); ++o) detail::add_to_row(sums.data() + o * size_t(g.L), g.L, bias16[o]);
    detail::float_to_bf16(sums.data(), out.data<bfloat16>() + n * g.O * g.L, g.O * g.L);
  }
  return out;
}

Conv2dGrads conv2d_16bit_backward(const Tensor& grad, const Tensor& x_in, const Tensor& w_in, int64_t stride,
                                  int64_t padding, DType half, bool need_dx, bool need_dw, bool need_dbias) {
  require_16bit(half);
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), gy = grad.contiguous();
  const ConvGeometry g = detail::conv_geometry(x, w, stride, padding);
  ENGINE_REQUIRE(gy.dtype() == half && gy.numel() == g.N * g.O * g.L, "[conv2d] gradient of shape ",
                 shape_str(gy.shape()), " and dtype ", dtype_name(gy.dtype()), " does not fit the ", dtype_name(half),
                 " output of ", g.N, " images x ", g.O, " channels x ", g.L, " positions");
  if (!bf16_products_pay(g, half))
    return conv2d_backward(gy.to(DType::Float32), rounded_float32(x, half), rounded_float32(w, half), stride, padding,
                           need_dx, need_dw, need_dbias);
  Conv2dGrads out;
  if (need_dx) out.dx = empty(x.shape());
  if (need_dw) out.dw = empty(w.shape());
  std::vector<bfloat16> w16_t;  // W16^T (rows, O), so that dcols' product reads it row by row
  if (need_dx) {
    const std::vector<bfloat16> w16 = rounded(w.data<float>(), g.O * g.rows);
    w16_t.resize(w16.size());
    for (int64_t o = 0; o < g.O; ++o)
      for (int64_t r = 0; r < g.rows; ++r) w16_t[size_t(r * g.O + o)] = w16[size_t(o * g.rows + r)];
  }
  std::vector<float> dcols(need_dx ? size_t(g.rows * g.L) : 0), g_wide(need_dbias ? size_t(g.O * g.L) : 0);
  std::vector<double> bias_sums(need_dbias ? size_t(g.O) : 0);
  PaddedRows cols(need_dw ? g.rows : 0, g.L);
  std::vector<bfloat16> cols16(need_dw ? size_t(g.rows * cols.ld) : 0);
  for (int64_t n = 0; n < g.N; ++n) {
    const bfloat16* g_n = gy.data<bfloat16>() + n * g.O * g.L;  // (O, L)
    if (need_dx) {
      gemm_bf16(g.rows, g.L, g.O, w16_t.data(), g.O, 1, g_n, g.L, 1, dcols.data(), g.L, 1, false);
      float* dx_n = out.dx.data<float>() + n * g.C * g.H * g.W;
      std::fill(dx_n, dx_n + g.C * g.H * g.W, 0.0f);
      detail::col2im_add_cpu(dcols.data(), g.image(), g.kh, g.kw, stride, padding, ColumnLayout::PerImage, dx_n);
    }
    if (need_dw) {  // dW (O, rows) += g_n (O, L) · cols16_n^T: B read down cols16's rows
      columns16_of(g, x.data<float>() + n * g.C * g.H * g.W, cols, cols16);
      gemm_bf16(g.O, g.rows, g.L, g_n, g.L, 1, cols16.data(), 1, cols.ld, out.dw.data<float>(), g.rows, 1,
                /*accumulate=*/n > 0);
    }
    if (need_dbias) {
      detail::bf16_to_float(g_n, g_wide.data(), g.O * g.L);
      for (size_t c = 0; c < bias_sums.size(); ++c) bias_sums[c] += detail::row_sum(g_wide.data() + c * g.L, g.L);
    }
  }
  detail::finish_grads(g, need_dbias, bias_sums, out);
  return out;
}

}  // namespace engine
