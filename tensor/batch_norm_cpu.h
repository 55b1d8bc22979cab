// Internal to tensor/: batch_norm.cc's per-row loops in their AVX-512 form, picked at run
// time. Each computes exactly what the portable loop in batch_norm.cc computes, in the same
// order, with no fused multiply-add (so the two agree to the bit):
//
//   if (detail::batch_norm_avx512()) s = detail::row_sums_avx512(S, dy, x, mean);
#pragma once

#include <cstdint>

namespace engine::detail {

// Whether this CPU runs the loops below (AVX-512F and VL).
bool batch_norm_avx512();

// sum d and sum d (x - mean) over S values: 16 float lanes, then the tail and the lanes
// added in double (tensor/lane_sum.h's order).
struct RowSums {
  double dy = 0, dy_xc = 0;
};
RowSums row_sums_avx512(int64_t S, const float* d, const float* x, float mean);

// sum x, and sum (x - mean)^2, over S values, in lane_sum's order.
double sum_avx512(int64_t S, const float* x);
double squared_deviations_avx512(int64_t S, const float* x, float mean);

// out = x scale + shift, then with relu: out where !(out <= 0), else 0 (NaN passes).
void normalise_row_avx512(int64_t S, const float* x, float scale, float shift, bool relu, float* out);

// out = k (d - mean_dy - (x - mean) slope); d may be out.
void batch_norm_dx_avx512(int64_t S, const float* d, const float* x, float mean, float k, float mean_dy, float slope,
                          float* out);

// One image's channel (H x W) through ReLU(x scale + shift) and a 2x2 max-pool at stride 2
// into out (H/2 x W/2), by max_pool2d's rule (the first maximum, the first NaN).
void relu_pool2_plane_avx512(int64_t H, int64_t W, const float* x, float scale, float shift, float* out);

// One image's channel (H x W) of the gradient before BatchNorm + ReLU + 2x2 max-pool: each
// window's gradient g (OH x OW) at the window's maximum of relu(x scale + shift), found
// by max_pool2d's rule, where relu passed there; 0 elsewhere.
void relu_pool2_grad_plane_avx512(int64_t H, int64_t W, const float* g, const float* x, float scale, float shift,
                                  float* out);

}  // namespace engine::detail
