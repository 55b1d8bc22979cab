#include "dist/reduce_ranks.h"

#include <immintrin.h>

#include <algorithm>
#include <cstring>
#include <type_traits>

#include "dist/reduce_into.h"
#include "tensor/cpu_features.h"
#include "tensor/half_convert.h"
#include "tensor/storage.h"

namespace engine::dist {

namespace {

// The float32 sum (or average) of reduce_typed below, 16 values at a time with AVX-512: the
// same adds in the same rank order, and the same division, so the same bits.
__attribute__((target("avx512f"))) void sum_floats_avx512(const std::vector<const char*>& in,
                                                          const std::vector<char*>& out, int64_t n, bool average) {
  const __m512 count = _mm512_set1_ps(float(in.size()));
  for (int64_t i = 0; i < n; i += 16) {
    const __mmask16 live = n - i >= 16 ? __mmask16(0xFFFF) : __mmask16((1u << (n - i)) - 1);
    __m512 acc = _mm512_maskz_loadu_ps(live, reinterpret_cast<const float*>(in[0]) + i);
    for (size_t k = 1; k < in.size(); ++k)
      acc = _mm512_add_ps(acc, _mm512_maskz_loadu_ps(live, reinterpret_cast<const float*>(in[k]) + i));
    if (average) acc = _mm512_div_ps(acc, count);
    for (char* o : out) _mm512_mask_storeu_ps(reinterpret_cast<float*>(o) + i, live, acc);
  }
}

// out[j][i] = in[0][i] (op) in[1][i] (op) ... for every j, i < n: always in rank order, so
// every rank would get the same bits. Blocks of 1024 keep the running result in L1 while
// every rank's data streams by once and the result is written once to each output.
// bfloat16 and float16 accumulate in float32 (Acc) and round once at the end.
template <class T>
void reduce_typed(const std::vector<const char*>& in, const std::vector<char*>& out, int64_t n, ReduceOp op) {
  constexpr bool k16 = std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>;
  using Acc = std::conditional_t<k16, float, T>;
  if constexpr (std::is_same_v<T, float>)
    if ((op == ReduceOp::Sum || op == ReduceOp::Avg) && cpu_has_avx512())
      return sum_floats_avx512(in, out, n, op == ReduceOp::Avg);
  constexpr int64_t kBlock = 1024;
  Acc acc[kBlock];
  T result[kBlock];
  // A block of rank k's data as Acc: in place for float32/int64, widened (vector
  // conversions, half_convert.h) for the 16-bit types.
  auto load = [&](size_t k, int64_t b, int64_t len, Acc* wide) -> const Acc* {
    const T* x = reinterpret_cast<const T*>(in[k]) + b;
    if constexpr (k16) {
      detail::widen(x, wide, len);
      return wide;
    } else {
      return x;
    }
  };
  for (int64_t b = 0; b < n; b += kBlock) {
    const int64_t len = std::min(kBlock, n - b);
    Acc wide[kBlock];
    const Acc* first = load(0, b, len, wide);
    std::copy(first, first + len, acc);
    for (size_t k = 1; k < in.size(); ++k) reduce_into(acc, load(k, b, len, wide), len, op);
    if (op == ReduceOp::Avg)
      for (int64_t i = 0; i < len; ++i) acc[i] /= Acc(in.size());
    const T* done = result;
    if constexpr (k16) {
      detail::narrow(acc, result, len);  // round the float32 sums once
    } else {
      done = acc;  // already the result
    }
    for (char* o : out) std::memcpy(reinterpret_cast<T*>(o) + b, done, size_t(len) * sizeof(T));
  }
}

}  // namespace

void reduce_ranks(DType dtype, const std::vector<const char*>& in, const std::vector<char*>& out, int64_t n,
                  ReduceOp op) {
  dispatch_storage(dtype, [&](auto zero) { reduce_typed<decltype(zero)>(in, out, n, op); });
}

}  // namespace engine::dist
