// The two 16-bit float formats mixed-precision training uses, as C++ value types:
//
//   bfloat16: 1 sign, 8 exponent, 7 mantissa bits. float32's range (up to 3.4e38) with
//             3 significant digits: the top half of a float32, rounded.
//   float16:  1 sign, 5 exponent, 10 mantissa bits (IEEE half). 3-4 digits, but the range
//             ends at 65504 and values under 6.1e-5 lose digits (subnormals down to 6e-8):
//             the reason fp16 training needs loss scaling.
//
//   engine::bfloat16 b = 1.0f / 3.0f;   // rounds to nearest, ties to even: 0.333984375
//   float back = b;                     // widening is exact
//   uint16_t raw = b.bits;              // 0x3eab
//
// Arithmetic happens in float: a + b converts both to float and gives a float; storing it
// back into a bfloat16 rounds once. That is how PyTorch computes elementwise ops on these
// types on the CPU, and why sums must accumulate in float32 (see reduce.cc). The same code
// converts on the GPU (compiled by nvcc for both sides), so both round alike, bit for bit.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define ENGINE_HOST_DEVICE __host__ __device__
#else
#define ENGINE_HOST_DEVICE
#endif

namespace engine {

ENGINE_HOST_DEVICE inline uint32_t float_bits(float f) {
#ifdef __CUDA_ARCH__
  return __float_as_uint(f);
#else
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
#endif
}
ENGINE_HOST_DEVICE inline float bits_float(uint32_t u) {
#ifdef __CUDA_ARCH__
  return __uint_as_float(u);
#else
  float f;
  std::memcpy(&f, &u, 4);
  return f;
#endif
}

// float32 -> bfloat16 keeps the top 16 bits, rounding the 16 it drops to nearest, ties to
// even: adding 0x7fff (plus 1 when the kept part is odd) carries into bit 16 exactly when
// the dropped part is over half (or half, with an odd kept part). Every NaN becomes the
// NaN stays NaN, quieted, with its sign (as the CPU's VCVTNEPS2BF16 does); the carry can
// turn the largest finite values into infinity, as it should.
ENGINE_HOST_DEVICE inline uint16_t float_to_bf16_bits(float f) {
  const uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x0040);
  return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);
}
ENGINE_HOST_DEVICE inline float bf16_bits_to_float(uint16_t b) { return bits_float(uint32_t(b) << 16); }

// float32 -> float16, rounding to nearest, ties to even.
ENGINE_HOST_DEVICE inline uint16_t float_to_fp16_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
  const uint32_t mag = u & 0x7fffffffu;
  if (mag > 0x7f800000u) return sign | 0x7e00u;   // NaN
  if (mag >= 0x477ff000u) return sign | 0x7c00u;  // >= 65520 rounds to infinity (65504 is the largest)
  if (mag < 0x38800000u) {
    // Below 2^-14, float16 is subnormal: a whole number of units of 2^-24. Scaling by 2^24
    // is exact, and nearbyint rounds to nearest even; 1024 units is the smallest normal.
#ifdef __CUDA_ARCH__
    return sign | uint16_t(nearbyintf(bits_float(mag) * 16777216.0f));
#else
    return sign | uint16_t(std::nearbyint(bits_float(mag) * 16777216.0f));
#endif
  }
  // Normal: exponent bias 127 -> 15, then drop 13 mantissa bits rounding as bf16 does.
  const uint32_t rebased = mag - ((127u - 15u) << 23);
  return sign | uint16_t((rebased + 0x0fffu + ((rebased >> 13) & 1u)) >> 13);
}
ENGINE_HOST_DEVICE inline float fp16_bits_to_float(uint16_t h) {
  const uint32_t sign = uint32_t(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu, man = h & 0x3ffu;
  if (exp == 0) return (sign ? -1.0f : 1.0f) * float(man) * 0x1p-24f;  // zero or subnormal: units of 2^-24
  if (exp == 31) return bits_float(sign | 0x7f800000u | (man << 13));  // inf or NaN
  return bits_float(sign | ((exp + 127u - 15u) << 23) | (man << 13));
}

struct bfloat16 {
  uint16_t bits = 0;
  bfloat16() = default;
  ENGINE_HOST_DEVICE bfloat16(float f) : bits(float_to_bf16_bits(f)) {}  // NOLINT: implicit, as float's narrowing is
  ENGINE_HOST_DEVICE operator float() const { return bf16_bits_to_float(bits); }
  ENGINE_HOST_DEVICE static bfloat16 from_bits(uint16_t b) {
    bfloat16 x;
    x.bits = b;
    return x;
  }
};

struct float16 {
  uint16_t bits = 0;
  float16() = default;
  ENGINE_HOST_DEVICE float16(float f) : bits(float_to_fp16_bits(f)) {}  // NOLINT: implicit, as above
  ENGINE_HOST_DEVICE operator float() const { return fp16_bits_to_float(bits); }
  ENGINE_HOST_DEVICE static float16 from_bits(uint16_t b) {
    float16 x;
    x.bits = b;
    return x;
  }
};

}  // namespace engine
