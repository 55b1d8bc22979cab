// The in-place ops of ops.h that add into or scale a tensor's own memory: add_ (a bias, a
// gradient accumulated, an optimizer's step) and mul_. They bump the storage's version, so
// that a backward that saved the old values refuses to run on the new ones.
#include <type_traits>

#include "tensor/cpu_features.h"
#include "tensor/cuda_ops.h"
#include "tensor/elementwise_cpu.h"
#include "tensor/loops.h"
#include "tensor/ops.h"

namespace engine {
namespace {

using detail::f32;
using detail::require_cpu;
using detail::require_same_dtype;
using detail::trailing_match;
using detail::whole_int64;
using detail::wrapping_add;
using detail::wrapping_mul;

// The scalar of add_ (alpha) and mul_ (the factor) on an int64 tensor.
void require_int64_scalar(const char* op, const Tensor& a, double s, const char* what) {
  ENGINE_REQUIRE(a.dtype() != DType::Int64 || whole_int64(s), "[", op, "] ", what, " ", s,
                 " is not a whole number in int64's range, as an int64 tensor ", shape_str(a.shape()),
                 " needs; convert the tensor first: t.to(DType::Float32)");
}

// x[i] += y[i] for i < n, the same for AVX-512 (a plain add: nothing to fuse).
__attribute__((target("avx512f"))) void add_into_avx512(int64_t n, float* x, const float* y) {
  for (int64_t i = 0; i < n; ++i) x[i] += y[i];
}

// x[i] += s y[i] for i < n: AVX-512's copy for s = 1 (where a product would be fused into
// the add, s y + x would round once instead of twice), else the loop built for the baseline.
template <class T>
void add_into(int64_t n, T* x, const T* y, T s) {
  if constexpr (std::is_same_v<T, float>)
    if (s == 1 && cpu_has_avx512()) return add_into_avx512(n, x, y);
  for (int64_t i = 0; i < n; ++i) x[i] = wrapping_add(x[i], wrapping_mul(s, y[i]));
}

}  // namespace

Tensor& add_(Tensor& a, const Tensor& b, double alpha) {
  require_same_dtype("add_", a, b);
  ENGINE_REQUIRE(broadcast_shapes(a.shape(), b.shape(), "add_") == a.shape(), "[add_] cannot add shape ",
                 shape_str(b.shape()), " into shape ", shape_str(a.shape()), " in place");
  require_distinct_elements(a, "add_");
  require_int64_scalar("add_", a, alpha, "alpha");
  // A source overlapping a elsewhere than element for element (a[1:] += a[:-1]) would be
  // read partly updated: read it whole first, as copy_ does. (PyTorch refuses it.)
  if (share_memory(a, b) && !same_view(a, b)) return add_(a, b.clone(), alpha);
  a.storage()->bump_version();
  if (is_half(a.dtype())) {
    Tensor wide = f32(a);
    a.copy_(add_(wide, f32(b), alpha));
    return a;
  }
  if (cuda_ops::on_cuda(a, b)) {
    cuda_ops::add_(a, b, alpha);
    return a;
  }
  require_cpu("add_", a), require_cpu("add_", b);
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* pa = static_cast<T*>(a.storage()->data());
    const T* pb = static_cast<const T*>(b.storage()->data());
    const T s = T(alpha);
    // b whole (the same shape) or repeated along a's rows (a bias): one flat loop per row.
    if (a.is_contiguous() && b.is_contiguous() && b.numel() > 0 && trailing_match(a.shape(), b.shape())) {
      T* x = pa + a.offset();
      const T* y = pb + b.offset();
      for (int64_t row = 0, n = b.numel(), rows = a.numel() / n; row < rows; ++row) add_into(n, x + row * n, y, s);
      return;
    }
    detail::for_each_offset<2>(a.shape(), {a.strides(), detail::broadcast_strides(b.shape(), b.strides(), a.shape())},
                               {a.offset(), b.offset()}, [&](const std::array<int64_t, 2>& k) {
                                 pa[k[0]] = wrapping_add(pa[k[0]], wrapping_mul(s, pb[k[1]]));
                               });
  });
  return a;
}

Tensor& mul_(Tensor& a, double s) {
  ENGINE_REQUIRE(a.defined(), "[mul_] got an undefined tensor");
  require_distinct_elements(a, "mul_");
  require_int64_scalar("mul_", a, s, "the factor");
  a.storage()->bump_version();
  if (is_half(a.dtype())) {
    Tensor wide = f32(a);
    a.copy_(mul_(wide, s));
    return a;
  }
  if (cuda_ops::on_cuda(a)) {
    cuda_ops::mul_(a, s);
    return a;
  }
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    T* p = static_cast<T*>(a.storage()->data());
    const T k = T(s);
    detail::for_each_offset<1>(a.shape(), {a.strides()}, {a.offset()},
                               [&](const std::array<int64_t, 1>& o) { p[o[0]] = wrapping_mul(p[o[0]], k); });
  });
  return a;
}

}  // namespace engine
