// Internal to tensor/: what the elementwise ops (elementwise.cc) and the in-place ones
// (inplace.cc) share: argument checks, the float32 detour of 16-bit tensors, and int64
// arithmetic that wraps as PyTorch's does.
//
//   detail::require_same_dtype("add_", a, b);
//   const int64_t s = detail::wrapping_add(INT64_MAX, int64_t(1));   // INT64_MIN, defined
#pragma once

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "tensor/ops.h"

namespace engine::detail {

inline void require_cpu(const char* op, const Tensor& t) {
  ENGINE_REQUIRE(t.defined(), "[", op, "] got an undefined tensor");
  ENGINE_REQUIRE(t.device().is_cpu(), "[", op, "] expects tensors on one device, got one on ", t.device().str(),
                 " with another on the cpu; move it with .to(Device::cpu())");
}

inline void require_same_dtype(const char* op, const Tensor& a, const Tensor& b) {
  ENGINE_REQUIRE(a.defined() && b.defined(), "[", op, "] got an undefined tensor");
  ENGINE_REQUIRE(a.dtype() == b.dtype(), "[", op, "] dtypes differ: ", dtype_name(a.dtype()), " ", shape_str(a.shape()),
                 " vs ", dtype_name(b.dtype()), " ", shape_str(b.shape()));
}

// bfloat16 and float16 have no kernels of their own: an op widens them to float32, runs,
// and rounds its result back once, which is what PyTorch's CPU kernels for these types do
// element by element.
inline Tensor f32(const Tensor& t) { return t.to(DType::Float32); }

// int64 arithmetic wraps modulo 2^64, as PyTorch's does (two's complement). It is done in
// uint64, where wrapping is defined C++; a signed overflow would be undefined behaviour.
template <class T>
T wrapping_add(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return T(uint64_t(x) + uint64_t(y));
  else
    return x + y;
}
template <class T>
T wrapping_sub(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return T(uint64_t(x) - uint64_t(y));
  else
    return x - y;
}
template <class T>
T wrapping_mul(T x, T y) {
  if constexpr (std::is_integral_v<T>)
    return T(uint64_t(x) * uint64_t(y));
  else
    return x * y;
}

// Whether an int64 tensor can take `s`: a whole number in int64's range. Converting 1.5
// would truncate it without a word, and one past the range is undefined behaviour.
inline bool whole_int64(double s) { return s == std::trunc(s) && s >= -0x1p63 && s < 0x1p63; }

// True when `b` (ignoring its leading 1s) equals the trailing dims of `shape`, so that
// broadcasting b over shape just repeats it whole.
bool trailing_match(const Shape& shape, const Shape& b);

}  // namespace engine::detail
