// Internal to tensor/: multiplies, adds and subtracts of 16 floats that the compiler never
// fuses into a multiply-add, for AVX-512 loops that must equal a portable loop to the bit.
// GCC fuses a plain _mm512_mul_ps feeding an _mm512_add_ps (its default -ffp-contract=fast);
// the _round_ forms, with the current rounding mode, it leaves alone. (Their masked forms
// give GCC 12's intrinsics a defined source to merge with.)
//
//   using namespace engine::detail::unfused;
//   const __m512 y = add(mul(x, scale), shift);  // round(round(x * scale) + shift)
#pragma once

#include <immintrin.h>

namespace engine::detail::unfused {

constexpr int kCurrentRounding = _MM_FROUND_CUR_DIRECTION;

__attribute__((target("avx512f"))) inline __m512 mul(__m512 a, __m512 b) {
  return _mm512_maskz_mul_round_ps(0xFFFF, a, b, kCurrentRounding);
}
__attribute__((target("avx512f"))) inline __m512 add(__m512 a, __m512 b) {
  return _mm512_maskz_add_round_ps(0xFFFF, a, b, kCurrentRounding);
}
__attribute__((target("avx512f"))) inline __m512 sub(__m512 a, __m512 b) {
  return _mm512_maskz_sub_round_ps(0xFFFF, a, b, kCurrentRounding);
}

}  // namespace engine::detail::unfused
