// Element types a Tensor can hold: float32 for values, int64 for labels and indices, and
// the 16-bit floats bfloat16 and float16 for mixed precision (tensor/half.h).
//
//   engine::DType t = engine::DType::BFloat16;
//   size_t bytes = engine::dtype_size(t);   // 2
//   std::string n = engine::dtype_name(t);  // "bfloat16"
//
// The kernels compute in float32 and int64 (dispatch); a 16-bit tensor is widened to
// float32 for an op and its result rounded back once (ops.h), except matmul, which has a
// bfloat16 kernel (gemm.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/check.h"
#include "tensor/half.h"

namespace engine {

enum class DType { Float32, Int64, BFloat16, Float16 };

inline size_t dtype_size(DType t) {
  switch (t) {
    case DType::Float32: return 4;
    case DType::Int64: return 8;
    default: return 2;
  }
}
inline const char* dtype_name(DType t) {
  switch (t) {
    case DType::Float32: return "float32";
    case DType::Int64: return "int64";
    case DType::BFloat16: return "bfloat16";
    default: return "float16";
  }
}
// bfloat16 and float16: the dtypes stored in 16 bits and computed in float32.
inline bool is_half(DType t) { return t == DType::BFloat16 || t == DType::Float16; }
inline bool is_floating(DType t) { return t != DType::Int64; }

// The DType that stores C++ type T.
template <class T>
constexpr DType dtype_of();
template <>
constexpr DType dtype_of<float>() {
  return DType::Float32;
}
template <>
constexpr DType dtype_of<int64_t>() {
  return DType::Int64;
}
template <>
constexpr DType dtype_of<bfloat16>() {
  return DType::BFloat16;
}
template <>
constexpr DType dtype_of<float16>() {
  return DType::Float16;
}

// Calls f with a value of the C++ type a compute kernel uses for `t` (float or int64_t),
// so one generic lambda serves both:
//   dispatch(t, [&](auto zero) { using T = decltype(zero); ... });
// A 16-bit dtype is refused: ops widen those to float32 before they get here.
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  ENGINE_REQUIRE(!is_half(t), "[dispatch] no ", dtype_name(t), " kernel here; widen with .to(DType::Float32)");
  if (t == DType::Float32) return f(float{});
  return f(int64_t{});
}

// The same over every dtype, for code that only moves or converts values (copies,
// printing, item()).
template <class F>
decltype(auto) dispatch_storage(DType t, F&& f) {
  switch (t) {
    case DType::BFloat16: return f(bfloat16{});
    case DType::Float16: return f(float16{});
    case DType::Float32: return f(float{});
    default: return f(int64_t{});
  }
}

}  // namespace engine
