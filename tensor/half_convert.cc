#include "tensor/half_convert.h"

#include <immintrin.h>

#include "tensor/cpu_features.h"

namespace engine::detail {
namespace {

bool has_avx512_bf16() {
  static const bool ok = cpu_has_avx512() && __builtin_cpu_supports("avx512bf16");
  return ok;
}

// 16 at a time; the tail by the scalar rule. The instruction rounds to nearest even, as
// half.h does, and keeps NaN a NaN, but reads subnormal inputs (below 2^-126) as zero, so
// a block holding any is redone by the scalar rule.
__attribute__((target("avx512f,avx512bf16"))) int64_t float_to_bf16_avx512(const float* in, bfloat16* out, int64_t n) {
  const __m512i exponent = _mm512_set1_epi32(0x7f800000), magnitude = _mm512_set1_epi32(0x7fffffff);
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    const __m512i u = _mm512_castps_si512(x);
    const __mmask16 subnormal = _mm512_testn_epi32_mask(u, exponent) & _mm512_test_epi32_mask(u, magnitude);
    if (subnormal) {
      for (int k = 0; k < 16; ++k) out[i + k] = bfloat16(in[i + k]);
      continue;
    }
    const __m256bh h = _mm512_cvtneps_pbh(x);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(out + i), reinterpret_cast<const __m256i&>(h));
  }
  return i;
}

__attribute__((target("avx512f"))) int64_t float_to_fp16_avx512(const float* in, float16* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    const __m512 x = _mm512_loadu_ps(in + i);
    // The masked forms (all 16 lanes) give GCC's intrinsics a defined source to merge with.
    _mm256_storeu_si256(
        reinterpret_cast<__m256i*>(out + i),
        _mm512_mask_cvtps_ph(_mm256_setzero_si256(), 0xffff, x, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    // VCVTPS2PH keeps a NaN's top payload bits; the scalar rule (and PyTorch, and the GPU)
    // gives every NaN the one quiet pattern with its sign. NaNs are rare: fix them one by one.
    const __mmask16 nan = _mm512_cmp_ps_mask(x, x, _CMP_UNORD_Q);
    for (int k = 0; nan && k < 16; ++k)
      if (nan >> k & 1) out[i + k] = float16(in[i + k]);
  }
  return i;
}

__attribute__((target("avx512f"))) int64_t fp16_to_float_avx512(const float16* in, float* out, int64_t n) {
  int64_t i = 0;
  for (; i + 16 <= n; i += 16)
    _mm512_storeu_ps(out + i, _mm512_mask_cvtph_ps(_mm512_setzero_ps(), 0xffff,
                                                   _mm256_loadu_si256(reinterpret_cast<const __m256i*>(in + i))));
  return i;
}

}  // namespace

void float_to_bf16(const float* in, bfloat16* out, int64_t n) {
  int64_t i = has_avx512_bf16() ? float_to_bf16_avx512(in, out, n) : 0;
  for (; i < n; ++i) out[i] = bfloat16(in[i]);
}

void bf16_to_float(const bfloat16* in, float* out, int64_t n) {
  // Exact: the 16 bits are the top half of the float. A plain loop the compiler vectorises.
  const uint16_t* b = reinterpret_cast<const uint16_t*>(in);
  uint32_t* f = reinterpret_cast<uint32_t*>(out);
  for (int64_t i = 0; i < n; ++i) f[i] = uint32_t(b[i]) << 16;
}

void float_to_fp16(const float* in, float16* out, int64_t n) {
  int64_t i = cpu_has_avx512() ? float_to_fp16_avx512(in, out, n) : 0;
  for (; i < n; ++i) out[i] = float16(in[i]);
}

void fp16_to_float(const float16* in, float* out, int64_t n) {
  int64_t i = cpu_has_avx512() ? fp16_to_float_avx512(in, out, n) : 0;
  for (; i < n; ++i) out[i] = in[i];
}

}  // namespace engine::detail
