// Internal to tensor/: im2col's and col2im's CPU loops on raw float32 buffers, shared by the
// tensor ops (nn_ops.cc) and the convolution that builds one image's columns at a time
// (conv2d.cc). Shapes, layouts and the order of the sums are those of nn_ops.h's im2col.
//
//   detail::im2col_cpu(x, {1, C, H, W}, 3, 3, 1, 1, ColumnLayout::PerImage, cols);
#pragma once

#include "tensor/nn_ops.h"

namespace engine::detail {

// cols = im2col(x): every entry written, padding as 0. With ColumnLayout::PerImage, row r
// of the columns may start at cols + r * row_stride (row_stride >= L; 0 means L): the
// floats between rows are left as they were.
void im2col_cpu(const float* x, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
                ColumnLayout layout, float* cols, int64_t row_stride = 0);
// x += col2im(cols): each column entry added into the image position it came from.
void col2im_add_cpu(const float* cols, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding,
                    ColumnLayout layout, float* x);

// The same at stride 1 with AVX-512 (columns_avx512.cc), for CPUs where columns_avx512():
// equal results, in a fraction of the time (no call per run of columns).
bool columns_avx512();
void im2col_stride1_avx512(const float* x, const Shape& xs, int64_t kh, int64_t kw, int64_t padding,
                           ColumnLayout layout, float* cols, int64_t row_stride = 0);
void col2im_add_stride1_avx512(const float* cols, const Shape& xs, int64_t kh, int64_t kw, int64_t padding,
                               ColumnLayout layout, float* x);

}  // namespace engine::detail
