// acc[i] = acc[i] (op) in[i]: the one elementwise reduction every CPU collective uses
// (the TCP ring as segments arrive, shared memory across the ranks' buffers). Avg adds;
// the caller divides once at the end, so every rank divides the same sum. bfloat16 and
// float16 add in float32 and round each partial result back (what travels is 16-bit).
//
//   reduce_into(acc, received, n, DType::Float32, ReduceOp::Max);
#pragma once

#include <cstdint>

#include "dist/process_group.h"
#include "tensor/dtype.h"

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

// The same on raw bytes of any dtype.
inline void reduce_into(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op) {
  dispatch_storage(dtype, [&](auto zero) {
    using T = decltype(zero);
    reduce_into(static_cast<T*>(acc), static_cast<const T*>(in), n, op);
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
