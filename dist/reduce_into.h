// acc[i] = acc[i] (op) in[i]: the one elementwise reduction every CPU collective uses
// (the TCP ring as segments arrive, shared memory across the ranks' buffers). Avg adds;
// the caller divides once at the end, so every rank divides the same sum.
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
      for (int64_t i = 0; i < n; ++i) acc[i] += in[i];
      break;
    case ReduceOp::Product:
      for (int64_t i = 0; i < n; ++i) acc[i] *= in[i];
      break;
    case ReduceOp::Min:
      for (int64_t i = 0; i < n; ++i) acc[i] = in[i] < acc[i] ? in[i] : acc[i];
      break;
    case ReduceOp::Max:
      for (int64_t i = 0; i < n; ++i) acc[i] = in[i] > acc[i] ? in[i] : acc[i];
      break;
  }
}

// The same on raw bytes of a dtype the collectives carry (float32 or int64).
inline void reduce_into(void* acc, const void* in, int64_t n, DType dtype, ReduceOp op) {
  if (dtype == DType::Float32)
    reduce_into(static_cast<float*>(acc), static_cast<const float*>(in), n, op);
  else
    reduce_into(static_cast<int64_t*>(acc), static_cast<const int64_t*>(in), n, op);
}

}  // namespace engine::dist
