// 2-d convolution on the CPU, one image at a time (nn_ops.h).
//
// As a matrix product, image n's output is out_n (O, L) = W (O, C kh kw) · cols_n (C kh kw, L)
// with L = OH OW output positions. The columns of one image are small (the lessons' second
// layer: 288 x 196 floats, 225 KB), so built one image at a time they stay in the core's L2
// cache from im2col through the GEMM's packing: the batch's columns (14 MB at batch 64) are
// never written to memory and read back, and out_n lands in its (N, O, OH, OW) place with
// no permuted copy. The backward rebuilds each image's columns instead of keeping them:
//   dcols_n = W^T · g_n, then col2im adds them into dx_n;
//   dW = sum_n g_n · cols_n^T;   dbias_o = sum_n sum_l g_n[o, l].
// g_n and cols_n both run along L, so dW is made of dot products (gemm_nt.h), with no
// transposed copy of either; their rows are laid out padded and aligned for it.
// Every element of out_n and of dcols_n is the same sum, in the same order, as in the
// whole-batch product, so forward and dx equal im2col + one GEMM bit for bit; dW adds one
// image's positions at a time, or two images' (see conv2d_backward).
#include <algorithm>
#include <cstdint>
#include <optional>
#include <vector>

#include "tensor/columns_cpu.h"
#include "tensor/conv2d_cpu.h"
#include "tensor/gemm.h"
#include "tensor/gemm_nt.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine {

using detail::add_to_row;
using detail::columns_of;
using detail::PaddedRows;
using detail::row_sum;

bool conv2d_per_image_applies(const Tensor& x, const Tensor& w, const Tensor& bias) {
  for (const Tensor* t : {&x, &w, &bias})
    if (t->defined() && (t->dtype() != DType::Float32 || t->device().is_cuda())) return false;
  return true;
}

Tensor conv2d_forward(const Tensor& x_in, const Tensor& w_in, const Tensor& bias, int64_t stride, int64_t padding) {
  const Tensor x = x_in.contiguous(), w = w_in.contiguous();
  const detail::ConvGeometry g = detail::conv_geometry(x, w, stride, padding, bias);
  Tensor out = empty({g.N, g.O, g.OH, g.OW});
  PaddedRows cols(g.rows, g.L);
  const Tensor b = bias.defined() ? bias.contiguous() : Tensor();
  const PackedA weights(g.O, g.rows, w.data<float>(), g.rows, 1);  // once, not per image
  for (int64_t n = 0; n < g.N; ++n) {
    columns_of(g, x.data<float>() + n * g.C * g.H * g.W, cols);
    float* o = out.data<float>() + n * g.O * g.L;
    gemm(weights, g.L, cols.rows, cols.ld, 1, o, g.L, 1, /*accumulate=*/false);
    if (b.defined())  // after the product, as the whole-batch path adds it
      for (int64_t c = 0; c < g.O; ++c) add_to_row(o + c * g.L, g.L, b.data<float>()[c]);
  }
  return out;
}

Conv2dGrads conv2d_backward(const Tensor& grad, const Tensor& x_in, const Tensor& w_in, int64_t stride, int64_t padding,
                            bool need_dx, bool need_dw, bool need_dbias) {
  const Tensor x = x_in.contiguous(), w = w_in.contiguous(), gy = grad.contiguous();
  const detail::ConvGeometry g = detail::conv_geometry(x, w, stride, padding);
  ENGINE_REQUIRE(gy.dtype() == DType::Float32 && gy.numel() == g.N * g.O * g.L, "[conv2d] gradient of shape ",
                 shape_str(gy.shape()), " does not fit the output of ", g.N, " images x ", g.O, " channels x ", g.L,
                 " positions");
  Conv2dGrads out;
  if (need_dx) out.dx = empty(x.shape());  // each image's part zeroed just before col2im adds into it
  if (need_dw) out.dw = empty(w.shape());
  std::vector<double> bias_sums(need_dbias ? size_t(g.O) : 0);
  std::vector<float> dcols(need_dx ? size_t(g.rows * g.L) : 0);  // col2im reads them dense
  std::optional<PackedA> weights_t;                              // W^T, packed once, not per image
  if (need_dx) weights_t.emplace(g.rows, g.O, w.data<float>(), 1, g.rows);
  // g_n's rows are read where they lie when they already start on lines and fill whole
  // vectors (L a multiple of 16 floats), else copied into padded rows.
  const bool g_in_place = g.L % 16 == 0 && reinterpret_cast<uintptr_t>(gy.data<float>()) % 64 == 0;
  // Where g_n is copied anyway, two images make one product for dW: with their rows side by
  // side, [g_n | g_n+1] · [cols_n | cols_n+1]^T = g_n cols_n^T + g_n+1 cols_n+1^T, and
  // gemm_nt's fixed cost per element (adding up its 16 lanes) is paid once per pair.
  const int64_t per_product = g_in_place ? 1 : 2;
  PaddedRows cols(need_dw ? g.rows : 0, g.L, per_product),
      g_copy((need_dx || need_dw) && !g_in_place ? g.O : 0, g.L, per_product);
  for (int64_t n0 = 0; n0 < g.N; n0 += per_product) {
    const int64_t count = std::min(per_product, g.N - n0);
    const float* g_rows = g_in_place ? gy.data<float>() + n0 * g.O * g.L : g_copy.rows;
    const int64_t g_ld = g_in_place ? g.L : g_copy.ld;
    for (int64_t t = 0; t < count; ++t) {
      const float* gn = gy.data<float>() + (n0 + t) * g.O * g.L;  // (O, L)
      if ((need_dx || need_dw) && !g_in_place)
        for (int64_t o = 0; o < g.O; ++o) std::copy(gn + o * g.L, gn + (o + 1) * g.L, g_copy.segment(t) + o * g_ld);
      const float* g_n = g_in_place ? gn : g_copy.segment(t);
      if (need_dx) {
        gemm(*weights_t, g.L, g_n, g_ld, 1, dcols.data(), g.L, 1, false);  // W^T · g_n
        float* dx_n = out.dx.data<float>() + (n0 + t) * g.C * g.H * g.W;
        std::fill(dx_n, dx_n + g.C * g.H * g.W, 0.0f);  // here, not in a pass of its own: it stays in cache
        detail::col2im_add_cpu(dcols.data(), g.image(), g.kh, g.kw, stride, padding, ColumnLayout::PerImage, dx_n);
      }
      if (need_dw) columns_of(g, x.data<float>() + (n0 + t) * g.C * g.H * g.W, cols, t);
      for (size_t c = 0; c < bias_sums.size(); ++c) bias_sums[c] += row_sum(gn + int64_t(c) * g.L, g.L);
    }
    if (need_dw)  // the first `count` segments of each row
      gemm_nt(g.O, g.rows, count * cols.seg, g_rows, g_ld, cols.rows, cols.ld, out.dw.data<float>(), g.rows,
              /*accumulate=*/n0 > 0);
  }
  detail::finish_grads(g, need_dbias, bias_sums, out);
  return out;
}

}  // namespace engine
