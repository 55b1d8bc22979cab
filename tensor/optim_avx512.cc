// The SGD and Adam updates 16 floats at a time (optim_cpu.h). The portable loops, compiled
// for the baseline x86-64, move at most 4 floats per instruction: on the lessons' MLP the
// SGD update was 9% of a training step, 7% with this (what is left is its memory traffic:
// three tensors read and two written, 5.4 MB a step); Adam's, with a square root and a
// division per element and four tensors that may alias, ran one float at a time: 34%.
#include <immintrin.h>

#include "tensor/optim_cpu.h"
#include "tensor/unfused_avx512.h"

namespace engine::detail {

namespace {

using unfused::add;  // no multiply-add fused: every value equals the portable loop's
using unfused::mul;
using unfused::sub;

// One kind of update (momentum or not, first step or not, Nesterov or not) for the whole
// tensor, chosen once outside the loop. Lanes past n are neither read nor written.
template <bool kBuffer, bool kFirst, bool kNesterov>
__attribute__((target("avx512f"))) void sgd_loop(int64_t n, float* p, const float* g, float* b, const SgdArgs& a) {
  const __m512 lr = _mm512_set1_ps(a.lr), wd = _mm512_set1_ps(a.weight_decay), m = _mm512_set1_ps(a.momentum),
               damp = _mm512_set1_ps(1 - a.dampening);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 live = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    const __m512 pk = _mm512_maskz_loadu_ps(live, p + k);
    __m512 d = add(_mm512_maskz_loadu_ps(live, g + k), mul(wd, pk));
    if constexpr (kBuffer) {
      const __m512 v = kFirst ? d : add(mul(m, _mm512_maskz_loadu_ps(live, b + k)), mul(damp, d));
      _mm512_mask_storeu_ps(b + k, live, v);
      d = kNesterov ? add(d, mul(m, v)) : v;
    }
    _mm512_mask_storeu_ps(p + k, live, sub(pk, mul(lr, d)));
  }
}

// Adam's rule as optim_steps.cc's portable loop writes it, operation for operation:
//   g' = g + wd p (Adam's L2 term, kDecay);  p = p decay;  m = b1 m + (1 - b1) g';
//   v = b2 v + ((1 - b2) g') g';  p = p - (step m) / (sqrt(v) / bc2 + eps).
// Square roots and divisions round correctly in both, so the two agree to the bit. (The
// masked forms, all lanes on: GCC 12 warns that the plain ones merge an undefined value.)
template <bool kDecay>
__attribute__((target("avx512f"))) void adam_loop(int64_t n, float* p, const float* g, float* m, float* v,
                                                  const AdamArgs& a) {
  const __m512 wd = _mm512_set1_ps(a.weight_decay), decay = _mm512_set1_ps(a.decay), b1 = _mm512_set1_ps(a.beta1),
               b2 = _mm512_set1_ps(a.beta2), one_b1 = _mm512_set1_ps(1 - a.beta1), one_b2 = _mm512_set1_ps(1 - a.beta2),
               step = _mm512_set1_ps(a.step_size), bc2 = _mm512_set1_ps(a.bias_correction2_sqrt),
               eps = _mm512_set1_ps(a.eps);
  for (int64_t k = 0; k < n; k += 16) {
    const __mmask16 live = n - k >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - k)) - 1);
    __m512 pk = _mm512_maskz_loadu_ps(live, p + k), gk = _mm512_maskz_loadu_ps(live, g + k);
    if constexpr (kDecay) gk = add(gk, mul(wd, pk));
    pk = mul(pk, decay);
    const __m512 mk = add(mul(b1, _mm512_maskz_loadu_ps(live, m + k)), mul(one_b1, gk));
    const __m512 vk = add(mul(b2, _mm512_maskz_loadu_ps(live, v + k)), mul(mul(one_b2, gk), gk));
    const __m512 denom = add(_mm512_maskz_div_ps(0xFFFF, _mm512_maskz_sqrt_ps(0xFFFF, vk), bc2), eps);
    _mm512_mask_storeu_ps(m + k, live, mk);
    _mm512_mask_storeu_ps(v + k, live, vk);
    _mm512_mask_storeu_ps(p + k, live, sub(pk, _mm512_maskz_div_ps(0xFFFF, mul(step, mk), denom)));
  }
}

}  // namespace

void adam_avx512(int64_t n, float* p, const float* g, float* m, float* v, const AdamArgs& a) {
  if (!a.decoupled && a.weight_decay != 0)
    adam_loop<true>(n, p, g, m, v, a);
  else
    adam_loop<false>(n, p, g, m, v, a);
}

void sgd_avx512(int64_t n, float* p, const float* g, float* b, const SgdArgs& a) {
  if (!b)
    sgd_loop<false, false, false>(n, p, g, b, a);
  else if (a.first)
    a.nesterov ? sgd_loop<true, true, true>(n, p, g, b, a) : sgd_loop<true, true, false>(n, p, g, b, a);
  else
    a.nesterov ? sgd_loop<true, false, true>(n, p, g, b, a) : sgd_loop<true, false, false>(n, p, g, b, a);
}

}  // namespace engine::detail
