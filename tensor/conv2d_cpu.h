// Internal to tensor/: what the per-image convolutions share, float32 (conv2d.cc) and
// 16-bit products under autocast (conv2d_16bit.cc): the layer's geometry, padded rows for
// one image's columns, and the small row loops around the products.
//
//   const detail::ConvGeometry g = detail::conv_geometry(x, w, stride, padding);
//   detail::PaddedRows cols(g.rows, g.L);
//   detail::columns_of(g, x.data<float>() + n * g.C * g.H * g.W, cols);   // image n
#pragma once

#include <cstdint>
#include <vector>

#include "tensor/nn_ops.h"
#include "tensor/tensor.h"

namespace engine::detail {

struct ConvGeometry {
  int64_t N, C, H, W, O, kh, kw, stride, padding, OH, OW, L, rows;  // L = OH OW, rows = C kh kw
  Shape image() const { return {1, C, H, W}; }
};

// Checks that x (N, C, H, W) and w (O, C, kh, kw) fit and are contiguous float32 on the CPU,
// and a defined bias is (O,) float32 on the CPU.
ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding,
                           const Tensor& bias = Tensor());

// Rows of `len` floats, each starting on a 64-byte line and padded with zeros to a whole
// number of 16 floats (a segment); with `segments` > 1, each row holds that many segments
// side by side, one per image. The products read these rows where they lie (gemm_nt
// always, gemm() for whole panels of B), and a vector load that straddles two cache lines
// costs two: a third of gemm_nt's time when the rows were 196 floats apart. The padding
// adds 0 * 0 to gemm_nt's sums, as its masked last step would.
struct PaddedRows {
  int64_t seg, ld;
  std::vector<float> buf;
  float* rows;
  PaddedRows(int64_t count, int64_t len, int64_t segments = 1);
  float* segment(int64_t t) { return rows + t * seg; }
};

// One image's columns into segment t of padded rows.
void columns_of(const ConvGeometry& g, const float* image, PaddedRows& cols, int64_t t = 0);

// The backward's last step: dw = 0 for an empty batch (no product wrote it), and dbias
// from its per-channel sums where asked for.
void finish_grads(const ConvGeometry& g, bool need_dbias, const std::vector<double>& bias_sums, Conv2dGrads& out);

// row[i] += v for i < n (16 floats at a time where the CPU has AVX-512).
void add_to_row(float* row, int64_t n, float v);

// The sum of a row of n floats in lane_sum's order.
double row_sum(const float* row, int64_t n);

}  // namespace engine::detail
