// acc[i] = acc[i] (op) in[i]: the one elementwise reduction every CPU collective uses
// (the TCP ring as segments arrive, shared memory across the ranks' buffers). Avg adds;
// the caller divides once at the end, so every rank divides the same sum. bfloat16 and
// float16 add in float32 and round each partial result back (what travels is 16-bit).
//
//   reduce_into(acc, received, n, DType::Float32, ReduceOp::Max);
#pragma once

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "dist/process_group.h"
#include "tensor/dtype.h"
#include "tensor/half_convert.h"

namespace engine::dist {

template <class T>
inline void reduce_into(T* acc, const T* in, int64_t n, ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      for (int64_t i = 0; i < n; ++i) acc[i] = T(acc[i] + in[i]);
      break;
    case ReduceOp::Product:
      for (int64_t i = 0; i < n; ++i) acc[i] = T(acc[i] * in[i]);
      break;
    case ReduceOp::Min:
      for (int64_t i = 0; i < n; ++i) acc[i] = in[i] < acc[i] ? in[i] : acc[i];
      break;
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i) acc[i] = in[i] > acc[i] ? in[i] : acc[i];
      break;
  }
}

// bfloat16 and float16: blocks of both widened to float32 by vector conversions, reduced,
// and rounded back once: the same values as the loop above (each result is the 16-bit
// rounding of a float32 result), without a scalar conversion per element.
template <class T>
inline void reduce_into_16bit(T* acc, const T* in, int64_t n, ReduceOp op) {
  constexpr int64_t kBlock = 1024;
  float a[kBlock], b[kBlock];
  for (int64_t i = 0; i < n; i += kBlock) {
    const int64_t len = std::min(kBlock, n - i);
    detail::widen(acc + i, a, len);
    detail::widen(in + i, b, len);
    reduce_into(a, b, len, op);
    detail::narrow(a, acc + i, len);
  }
}

// The same on raw bytes of any dtype.
inline void reduce_into(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op) {
  dispatch_storage(dtype, [&](auto zero) {
    using T = decltype(zero);
    if constexpr (std::is_same_v<T, bfloat16> || std::is_same_v<T, float16>) {
      reduce_into_16bit(static_cast<T*>(acc), static_cast<const T*>(in), n, op);
    } else {
      reduce_into(static_cast<T*>(acc), static_cast<const T*>(in), n, op);
    }
  });
}

// Fills x with zeros that leave any value unchanged when added to it: -0.0 for the
// floating types (v + -0 = v for every v, -0 included; +0 would turn -0 into +0), 0 for
// int64. A rank with nothing to add to a sum adds these.
inline void fill_additive_identity(void* x, int64_t count, DType dtype) {
  dispatch_storage(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(x);
    const T z = std::is_same_v<T, int64_t> ? T(0) : T(-0.0f);
    std::fill(p, p + count, z);
  });
}

// x[i] /= n for the floating dtypes (Avg's one division, by the owner of a reduced segment).
inline void divide_by(void* x, int64_t count, DType dtype, int n) {
  dispatch_storage(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(x);
    for (int64_t i = 0; i < count; ++i) p[i] = T(p[i] / T(n));
  });
}

}  // namespace engine::dist
