// Element types a Tensor can hold: float32 for values, int64 for labels and indices.
//
//   engine::DType t = engine::DType::Float32;
//   size_t bytes = engine::dtype_size(t);   // 4
//   std::string n = engine::dtype_name(t);  // "float32"
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>

#include "tensor/check.h"

namespace engine {

enum class DType { Float32, Int64 };

inline size_t dtype_size(DType t) { return t == DType::Float32 ? 4 : 8; }
inline const char* dtype_name(DType t) { return t == DType::Float32 ? "float32" : "int64"; }

// The DType that stores C++ type T (float or int64_t).
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

// Calls f with a value of the C++ type that `t` names, so one generic lambda serves all
// dtypes:  dispatch(t, [&](auto zero) { using T = decltype(zero); ... });
template <class F>
decltype(auto) dispatch(DType t, F&& f) {
  if (t == DType::Float32) return f(float{});
  return f(int64_t{});
}

}  // namespace engine
