// What the per-image convolutions share (conv2d_cpu.h).
#include "tensor/conv2d_cpu.h"

#include <immintrin.h>

#include "tensor/batch_norm_cpu.h"
#include "tensor/columns_cpu.h"
#include "tensor/lane_sum.h"
#include "tensor/nn_ops.h"

namespace engine::detail {

ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, int64_t stride, int64_t padding, const Tensor& bias) {
  const Shape& xs = x.shape();
  const Shape& ws = w.shape();
  ENGINE_REQUIRE(ws.size() == 4 && xs.size() == 4 && xs[1] == ws[1], "[conv2d] input ", shape_str(xs),
                 " does not fit weight ", shape_str(ws));
  check_window("conv2d", xs, ws[2], ws[3], stride, padding);
  for (const Tensor* t : {&x, &w})
    ENGINE_REQUIRE(t->dtype() == DType::Float32 && t->is_contiguous() && !t->device().is_cuda(),
                   "[conv2d] the per-image path needs contiguous float32 CPU tensors, got ", dtype_name(t->dtype()),
                   " on ", t->device().str());
  const int64_t OH = window_out_size(xs[2], ws[2], stride, padding),
                OW = window_out_size(xs[3], ws[3], stride, padding);
  if (bias.defined())
    ENGINE_REQUIRE(bias.shape() == Shape{ws[0]} && bias.dtype() == DType::Float32 && !bias.device().is_cuda(),
                   "[conv2d] bias must be (", ws[0], ",) float32 on the CPU, got ", shape_str(bias.shape()), " ",
                   dtype_name(bias.dtype()), " on ", bias.device().str());
  return {xs[0], xs[1], xs[2], xs[3], ws[0], ws[2], ws[3], stride, padding, OH, OW, OH * OW, ws[1] * ws[2] * ws[3]};
}

PaddedRows::PaddedRows(int64_t count, int64_t len, int64_t segments)
    : seg((len + 15) / 16 * 16), ld(seg * segments), buf(static_cast<size_t>(count * ld + 16), 0.0f) {
  rows = reinterpret_cast<float*>((reinterpret_cast<uintptr_t>(buf.data()) + 63) & ~uintptr_t(63));
}

void columns_of(const ConvGeometry& g, const float* image, PaddedRows& cols, int64_t t) {
  im2col_cpu(image, g.image(), g.kh, g.kw, g.stride, g.padding, ColumnLayout::PerImage, cols.segment(t), cols.ld);
}

void finish_grads(const ConvGeometry& g, bool need_dbias, const std::vector<double>& bias_sums, Conv2dGrads& out) {
  if (out.dw.defined() && g.N == 0) out.dw.fill_(0.0);
  if (!need_dbias) return;
  out.dbias = empty({g.O});
  for (int64_t c = 0; c < g.O; ++c) out.dbias.data<float>()[c] = float(bias_sums[size_t(c)]);
}

namespace {
// This file is built for the baseline x86-64, where the compiler's own loop moves 4 floats.
__attribute__((target("avx512f"))) void add_to_row_avx512(float* row, int64_t n, float v) {
  const __m512 vv = _mm512_set1_ps(v);
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    _mm512_mask_storeu_ps(row + i, live, _mm512_maskz_add_ps(live, _mm512_maskz_loadu_ps(live, row + i), vv));
  }
}
}  // namespace

void add_to_row(float* __restrict row, int64_t n, float v) {
  if (columns_avx512()) return add_to_row_avx512(row, n, v);
  for (int64_t i = 0; i < n; ++i) row[i] += v;
}

// sum_avx512 keeps lane_sum's order, with AVX-512.
double row_sum(const float* row, int64_t n) {
  if (batch_norm_avx512()) return sum_avx512(n, row);
  return lane_sum(n, [row](int64_t l) { return row[l]; });
}

}  // namespace engine::detail
