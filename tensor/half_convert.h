// Internal: whole arrays converted between float32 and the 16-bit floats, with AVX-512
// where the CPU has it (VCVTNEPS2BF16 for bfloat16, VCVTPS2PH for float16, both rounding to
// nearest even like half.h) and half.h's loops otherwise. Tensor::to() uses these for
// dense tensors: mixed precision converts every weight and activation, every step.
#pragma once

#include <cstdint>

#include "tensor/half.h"

namespace engine::detail {

void float_to_bf16(const float* in, bfloat16* out, int64_t n);
void bf16_to_float(const bfloat16* in, float* out, int64_t n);
void float_to_fp16(const float* in, float16* out, int64_t n);
void fp16_to_float(const float16* in, float* out, int64_t n);

}  // namespace engine::detail
