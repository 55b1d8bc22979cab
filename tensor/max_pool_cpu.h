// Internal to tensor/: the vectorised 2x2 max-pool of one row of windows, shared by
// max_pool2d_forward (nn_ops.cc) and BatchNorm + ReLU + pool fused (batch_norm.cc).
//
//   if (detail::max_pool_2x2_vectorised())
//     detail::max_pool_2x2_row(row0, row1, top, W, OW, out, where);
#pragma once

#include <cstdint>

namespace engine::detail {

// Whether this CPU runs max_pool_2x2_row (AVX-512F and VL).
bool max_pool_2x2_vectorised();
// Outputs 0 .. OW-1 of one row of 2x2 windows over rows r0 and r1 (each W floats): the
// first maximum (row by row) wins, and the first NaN; where (unless null) = top + its column, plus W in r1
// (top: the flat index of r0[0] in the whole input).
void max_pool_2x2_row(const float* r0, const float* r1, int64_t top, int64_t W, int64_t OW, float* out, int64_t* where);

}  // namespace engine::detail
