// Whole arrays converted between float32 and the 16-bit floats, with AVX-512 where the CPU
// has it (VCVTNEPS2BF16 for bfloat16, VCVTPS2PH for float16, both rounding to nearest even
// like half.h) and half.h's loops otherwise. Tensor::to() uses these for dense tensors
// (mixed precision converts every weight and activation, every step), and the collectives
// to add 16-bit gradients in float32.
//
//   float wide[n];
//   detail::widen(bf16_values, wide, n);    // exact
//   detail::narrow(wide, bf16_values, n);   // rounds to nearest, ties to even
#pragma once

#include <cstdint>

#include "tensor/half.h"

namespace engine::detail {

void float_to_bf16(const float* in, bfloat16* out, int64_t n);
void bf16_to_float(const bfloat16* in, float* out, int64_t n);
void float_to_fp16(const float* in, float16* out, int64_t n);
void fp16_to_float(const float16* in, float* out, int64_t n);

// The same, chosen by type (for templates).
inline void widen(const bfloat16* in, float* out, int64_t n) { bf16_to_float(in, out, n); }
inline void widen(const float16* in, float* out, int64_t n) { fp16_to_float(in, out, n); }
inline void narrow(const float* in, bfloat16* out, int64_t n) { float_to_bf16(in, out, n); }
inline void narrow(const float* in, float16* out, int64_t n) { float_to_fp16(in, out, n); }

}  // namespace engine::detail
