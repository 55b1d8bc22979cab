// Elementwise ops from ops.h. Each op is one line naming its formula; the loops that walk
// any strides and broadcasts live in three helpers at the top.
#include <algorithm>
#include <climits>
#include <cmath>
#include <type_traits>

#include "tensor/cpu_features.h"
#include "tensor/cuda_ops.h"
#include "tensor/elementwise_cpu.h"
#include "tensor/loops.h"
#include "tensor/ops.h"

namespace engine {

bool detail::trailing_match(const Shape& shape, const Shape& b) {
  size_t lead = 0;
  while (lead < b.size() && b[lead] == 1) ++lead;
  const size_t n = b.size() - lead;
  if (n > shape.size()) return false;
  return std::equal(b.begin() + lead, b.end(), shape.end() - n);
}

namespace {

using detail::f32;
using detail::require_cpu;
using detail::require_same_dtype;
using detail::trailing_match;
using detail::whole_int64;
using detail::wrapping_add;
using detail::wrapping_mul;
using detail::wrapping_sub;

using cuda::BinaryOp;
using cuda::UnaryOp;

void require_float(const char* op, const Tensor& t) {
  ENGINE_REQUIRE(t.defined(), "[", op, "] got an undefined tensor");
  ENGINE_REQUIRE(is_floating(t.dtype()), "[", op, "] needs a floating-point tensor, got ", dtype_name(t.dtype()));
}

// Two different floating dtypes meet in float32, as PyTorch promotes bfloat16 or float16
// with float32 (and bfloat16 with float16); int64 with a float stays an error.
bool mixed_floats(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.dtype() != b.dtype() && is_floating(a.dtype()) && is_floating(b.dtype());
}

// The flat loop of a unary op, compiled a second time for AVX-512, where it moves 16 floats
// per instruction (this file is built for the baseline x86-64: 4). f is inlined into either
// copy; the unary ops' f hold no multiply followed by an add for the compiler to fuse
// (selects, negation, squares, library calls), so both copies give the same values.
template <class T, class R, class F>
__attribute__((target("avx512f"))) void flat_map_avx512(int64_t n, const T* p, R* o, F& f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(p[i]);
}

// The same for two inputs of one shape: o[i] = f(a[i], b[i]) (relu_backward's select).
template <class F>
__attribute__((target("avx512f"))) void flat_zip_avx512(int64_t n, const float* __restrict a, const float* __restrict b,
                                                        float* __restrict o, F& f) {
  for (int64_t i = 0; i < n; ++i) o[i] = f(a[i], b[i]);
}

// out[i] = f(a[i]) for T in a's dtype, R the output type.
template <class T, class R, class F>
Tensor map1(const Tensor& a, F f) {
  Tensor out = empty(a.shape(), dtype_of<R>());
  R* o = out.data<R>();
  const T* in = static_cast<const T*>(a.storage()->data());
  if (a.is_contiguous()) {  // the common case: one flat, vectorisable loop
    const T* p = in + a.offset();
    if (cpu_has_avx512()) {
      flat_map_avx512<T, R>(a.numel(), p, o, f);
      return out;
    }
    for (int64_t i = 0, n = a.numel(); i < n; ++i) o[i] = f(p[i]);
    return out;
  }
  detail::for_each_offset<2>(a.shape(), {out.strides(), a.strides()}, {0, a.offset()},
                             [&](const std::array<int64_t, 2>& k) { o[k[0]] = f(in[k[1]]); });
  return out;
}

// out[i] = f(a[i], b[i]) after broadcasting a and b together.
template <class T, class R, class F>
Tensor map2(const char* op, const Tensor& a, const Tensor& b, F f) {
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, dtype_of<R>());
  R* o = out.data<R>();
  const T* pa = static_cast<const T*>(a.storage()->data());
  const T* pb = static_cast<const T*>(b.storage()->data());
  if (a.shape() == b.shape() && a.is_contiguous() && b.is_contiguous()) {
    pa += a.offset(), pb += b.offset();
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = f(pa[i], pb[i]);
    return out;
  }
  if (b.numel() == 1 && a.shape() == shape && a.is_contiguous()) {  // tensor op scalar
    pa += a.offset();
    const T s = pb[b.offset()];
    for (int64_t i = 0, n = out.numel(); i < n; ++i) o[i] = f(pa[i], s);
    return out;
  }
  if (a.shape() == shape && a.is_contiguous() && b.is_contiguous() && b.numel() > 0 && numel(shape) % b.numel() == 0 &&
      trailing_match(shape, b.shape())) {
    // b repeats along the leading dims of a (a bias added to every row, or a scalar).
    pa += a.offset(), pb += b.offset();
    const int64_t inner = b.numel(), outer = out.numel() / std::max<int64_t>(inner, 1);
    for (int64_t r = 0; r < outer; ++r, pa += inner, o += inner)
      for (int64_t j = 0; j < inner; ++j) o[j] = f(pa[j], pb[j]);
    return out;
  }
  detail::for_each_offset<3>(shape,
                             {out.strides(), detail::broadcast_strides(a.shape(), a.strides(), shape),
                              detail::broadcast_strides(b.shape(), b.strides(), shape)},
                             {0, a.offset(), b.offset()},
                             [&](const std::array<int64_t, 3>& k) { o[k[0]] = f(pa[k[1]], pb[k[2]]); });
  return out;
}

// Arithmetic: same dtype in and out, for float32 and int64.
template <class F>
Tensor arith(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, F f) {
  if (mixed_floats(a, b)) return arith(op, kind, f32(a), f32(b), f);
  require_same_dtype(op, a, b);
  if (is_half(a.dtype())) return arith(op, kind, f32(a), f32(b), f).to(a.dtype());
  if (cuda_ops::on_cuda(a, b)) return cuda_ops::binary(op, kind, a, b);
  require_cpu(op, a), require_cpu(op, b);
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return map2<T, T>(op, a, b, [&](T x, T y) { return T(f(x, y)); });
  });
}

// Comparisons: float32 mask out.
template <class F>
Tensor compare(const char* op, BinaryOp kind, const Tensor& a, const Tensor& b, F f) {
  if (mixed_floats(a, b)) return compare(op, kind, f32(a), f32(b), f);
  require_same_dtype(op, a, b);
  if (is_half(a.dtype())) return compare(op, kind, f32(a), f32(b), f);
  if (cuda_ops::on_cuda(a, b)) return cuda_ops::binary(op, kind, a, b);
  require_cpu(op, a), require_cpu(op, b);
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return map2<T, float>(op, a, b, [&](T x, T y) { return f(x, y) ? 1.0f : 0.0f; });
  });
}

// Float-only unary math.
template <class F>
Tensor unary_float(const char* op, UnaryOp kind, const Tensor& a, F f, double p0 = 0) {
  require_float(op, a);
  if (is_half(a.dtype())) return unary_float(op, kind, f32(a), f, p0).to(a.dtype());
  if (cuda_ops::on_cuda(a)) return cuda_ops::unary(op, kind, a, p0);
  require_cpu(op, a);
  return map1<float, float>(a, f);
}

// Unary ops that keep the dtype (neg, abs, relu, clamp).
template <class F>
Tensor unary_any(const char* op, UnaryOp kind, const Tensor& a, F f, double p0 = 0, double p1 = 0) {
  ENGINE_REQUIRE(a.defined(), "[", op, "] got an undefined tensor");
  if (is_half(a.dtype())) return unary_any(op, kind, f32(a), f, p0, p1).to(a.dtype());
  if (cuda_ops::on_cuda(a)) return cuda_ops::unary(op, kind, a, p0, p1);
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return map1<T, T>(a, [&](T x) { return T(f(x)); });
  });
}

// The scalar of `tensor op double`, in the tensor's dtype. An int64 tensor takes only whole
// numbers in int64's range: 3 * 1.5 would otherwise truncate 1.5 to 1 without a word
// (PyTorch promotes to float instead; here the caller converts, and sees that it did).
Tensor scalar_like(const Tensor& a, double s) {
  ENGINE_REQUIRE(a.dtype() != DType::Int64 || whole_int64(s), "[", shape_str(a.shape()), " int64 tensor op ", s,
                 "] an int64 tensor meets only whole numbers in int64's range; convert it "
                 "first: t.to(DType::Float32)");
  return scalar_tensor(s, a.dtype());
}

// The GPU does not trap on a bad integer division; look for one before dividing.
void require_int64_divisible(const Tensor& a, const Tensor& b) {
  const Tensor zero = scalar_tensor(0, DType::Int64).to(b.device());
  ENGINE_REQUIRE(sum(eq(b, zero)).item() == 0, "[div] int64 division by zero");
  const Tensor lowest = scalar_tensor(double(INT64_MIN), DType::Int64).to(a.device());
  const Tensor minus1 = scalar_tensor(-1, DType::Int64).to(b.device());
  ENGINE_REQUIRE(sum(eq(a, lowest) * eq(b, minus1)).item() == 0, "[div] int64 ", INT64_MIN,
                 " / -1 overflows (the quotient 2^63 does not fit)");
}

}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  return arith("add", BinaryOp::Add, a, b, [](auto x, auto y) { return wrapping_add(x, y); });
}
Tensor sub(const Tensor& a, const Tensor& b) {
  return arith("sub", BinaryOp::Sub, a, b, [](auto x, auto y) { return wrapping_sub(x, y); });
}
Tensor mul(const Tensor& a, const Tensor& b) {
  return arith("mul", BinaryOp::Mul, a, b, [](auto x, auto y) { return wrapping_mul(x, y); });
}
Tensor div(const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::Int64 && b.dtype() == DType::Int64 && cuda_ops::on_cuda(a, b)) require_int64_divisible(a, b);
  return arith("div", BinaryOp::Div, a, b, [](auto x, auto y) {
    if constexpr (std::is_integral_v<decltype(x)>) {
      // Both are undefined behaviour in C++ and kill the process on x86 (SIGFPE).
      ENGINE_REQUIRE(y != 0, "[div] int64 division by zero");
      ENGINE_REQUIRE(!(y == -1 && x == INT64_MIN), "[div] int64 ", x,
                     " / -1 overflows (the quotient 2^63 does not fit)");
    }
    return x / y;
  });
}
Tensor pow(const Tensor& a, const Tensor& b) {
  require_float("pow", a);
  return arith("pow", BinaryOp::Pow, a, b, [](auto x, auto y) { return std::pow(x, y); });
}
Tensor maximum(const Tensor& a, const Tensor& b) {
  return arith("maximum", BinaryOp::Maximum, a, b, [](auto x, auto y) { return x > y || x != x ? x : y; });  // NaN wins
}
Tensor minimum(const Tensor& a, const Tensor& b) {
  return arith("minimum", BinaryOp::Minimum, a, b, [](auto x, auto y) { return x < y || x != x ? x : y; });
}
Tensor eq(const Tensor& a, const Tensor& b) {
  return compare("eq", BinaryOp::Eq, a, b, [](auto x, auto y) { return x == y; });
}
Tensor ne(const Tensor& a, const Tensor& b) {
  return compare("ne", BinaryOp::Ne, a, b, [](auto x, auto y) { return x != y; });
}
Tensor lt(const Tensor& a, const Tensor& b) {
  return compare("lt", BinaryOp::Lt, a, b, [](auto x, auto y) { return x < y; });
}
Tensor le(const Tensor& a, const Tensor& b) {
  return compare("le", BinaryOp::Le, a, b, [](auto x, auto y) { return x <= y; });
}
Tensor gt(const Tensor& a, const Tensor& b) {
  return compare("gt", BinaryOp::Gt, a, b, [](auto x, auto y) { return x > y; });
}
Tensor ge(const Tensor& a, const Tensor& b) {
  return compare("ge", BinaryOp::Ge, a, b, [](auto x, auto y) { return x >= y; });
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  if (mixed_floats(a, b)) return where(cond, f32(a), f32(b));
  require_same_dtype("where", a, b);
  ENGINE_REQUIRE(cond.defined(), "[where] got an undefined condition");
  if (is_half(cond.dtype())) return where(f32(cond), a, b);
  if (is_half(a.dtype())) return where(cond, f32(a), f32(b)).to(a.dtype());
  if (cuda_ops::on_cuda(cond) || cuda_ops::on_cuda(a, b)) return cuda_ops::where(cond, a, b);
  require_cpu("where", cond), require_cpu("where", a), require_cpu("where", b);
  require_same_dtype("where", a, b);
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype());
  dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    dispatch(cond.dtype(), [&](auto czero) {
      using C = decltype(czero);
      T* o = out.data<T>();
      const C* pc = static_cast<const C*>(cond.storage()->data());
      const T* pa = static_cast<const T*>(a.storage()->data());
      const T* pb = static_cast<const T*>(b.storage()->data());
      detail::for_each_offset<4>(shape,
                                 {out.strides(), detail::broadcast_strides(cond.shape(), cond.strides(), shape),
                                  detail::broadcast_strides(a.shape(), a.strides(), shape),
                                  detail::broadcast_strides(b.shape(), b.strides(), shape)},
                                 {0, cond.offset(), a.offset(), b.offset()}, [&](const std::array<int64_t, 4>& k) {
                                   o[k[0]] = pc[k[1]] != C(0) ? pa[k[2]] : pb[k[3]];
                                 });
    });
  });
  return out;
}

// int64 negates modulo 2^64, so -INT64_MIN is INT64_MIN as in PyTorch (a plain -x would be
// undefined behaviour there).
template <class T>
T negate(T x) {
  if constexpr (std::is_integral_v<T>)
    return T(uint64_t(0) - uint64_t(x));
  else
    return -x;
}
Tensor neg(const Tensor& a) {
  return unary_any("neg", UnaryOp::Neg, a, [](auto x) { return negate(x); });
}
// fabs clears the sign bit: abs(-0.0) is +0.0, as in PyTorch.
Tensor abs(const Tensor& a) {
  return unary_any("abs", UnaryOp::Abs, a, [](auto x) {
    if constexpr (std::is_integral_v<decltype(x)>)
      return x < 0 ? negate(x) : x;
    else
      return std::fabs(x);
  });
}
// !(x <= 0) rather than x > 0: NaN passes through, as in PyTorch.
Tensor relu(const Tensor& a) {
  return unary_any("relu", UnaryOp::Relu, a, [](auto x) { return !(x <= 0) ? x : decltype(x)(0); });
}
Tensor relu_backward(const Tensor& grad, const Tensor& x) {
  require_same_dtype("relu_backward", grad, x);
  if (is_half(x.dtype())) return relu_backward(f32(grad), f32(x)).to(x.dtype());
  if (cuda_ops::on_cuda(grad, x)) return cuda_ops::binary("relu_backward", cuda::BinaryOp::ReluBackward, grad, x);
  const bool dense = !cuda_ops::on_cuda(grad, x) && grad.dtype() == DType::Float32 && x.dtype() == DType::Float32 &&
                     grad.shape() == x.shape() && grad.is_contiguous() && x.is_contiguous();
  // The gradient passes where !(x <= 0): at x > 0 and at NaN (PyTorch's threshold_backward).
  if (!dense) return mul(grad, 1.0 - le(x, zeros({}, x.dtype())));  // views, broadcasts: the two-op form
  Tensor out = empty(x.shape());
  // Read g unconditionally, so the select vectorises without branches.
  auto pass = [](float gi, float xi) { return !(xi <= 0) ? gi : 0.0f; };
  const float *g = grad.data<float>(), *px = x.data<float>();
  float* o = out.data<float>();
  if (cpu_has_avx512()) {
    flat_zip_avx512(x.numel(), g, px, o, pass);
    return out;
  }
  for (int64_t i = 0, n = x.numel(); i < n; ++i) o[i] = pass(g[i], px[i]);
  return out;
}
Tensor clamp(const Tensor& a, double lo, double hi) {
  ENGINE_REQUIRE(!std::isnan(lo) && !std::isnan(hi), "[clamp] a bound is NaN (lower ", lo, ", upper ", hi, ")");
  ENGINE_REQUIRE(lo <= hi, "[clamp] lower bound ", lo, " exceeds upper bound ", hi);
  if (a.defined() && a.dtype() == DType::Int64) {
    // Whole bounds only (PyTorch would return floats for 1.5); past int64's range they
    // bound nothing, so they are brought to its ends (converting them would be undefined).
    ENGINE_REQUIRE(lo == std::trunc(lo) && hi == std::trunc(hi), "[clamp] an int64 tensor ", shape_str(a.shape()),
                   " takes whole bounds, got ", lo, " and ", hi, "; convert the tensor first: t.to(DType::Float32)");
    lo = std::clamp(lo, -0x1p63, 0x1p63), hi = std::clamp(hi, -0x1p63, 0x1p63);
    const int64_t ilo = lo < 0x1p63 ? int64_t(lo) : INT64_MAX, ihi = hi < 0x1p63 ? int64_t(hi) : INT64_MAX;
    return unary_any(
        "clamp", UnaryOp::Clamp, a, [=](auto x) { return x < ilo ? ilo : (x > ihi ? ihi : x); }, double(ilo),
        double(ihi));
  }
  return unary_any(
      "clamp", UnaryOp::Clamp, a,
      [=](auto x) {
        using T = decltype(x);
        return x < T(lo) ? T(lo) : (x > T(hi) ? T(hi) : x);
      },
      lo, hi);
}
Tensor exp(const Tensor& a) {
  return unary_float("exp", UnaryOp::Exp, a, [](float x) { return std::exp(x); });
}
Tensor log(const Tensor& a) {
  return unary_float("log", UnaryOp::Log, a, [](float x) { return std::log(x); });
}
Tensor sqrt(const Tensor& a) {
  return unary_float("sqrt", UnaryOp::Sqrt, a, [](float x) { return std::sqrt(x); });
}
Tensor tanh(const Tensor& a) {
  return unary_float("tanh", UnaryOp::Tanh, a, [](float x) { return std::tanh(x); });
}
// x^2 is x x; x^0.5 and x^-0.5 are sqrt(x) and 1 / sqrt(x), as PyTorch computes them: they
// differ from C's pow at -inf (NaN, where pow gives +inf or +0) and at -0 (-0 and -inf,
// where pow gives +0 and +inf), and the gradient e x^(e - 1) goes through them too.
static float pow_scalar(float x, float e) {
  if (e == 0.5f) return std::sqrt(x);
  if (e == -0.5f) return 1.0f / std::sqrt(x);
  return std::pow(x, e);
}
Tensor pow(const Tensor& a, double e) {
  if (e == 2) return unary_float("pow", UnaryOp::Square, a, [](float x) { return x * x; });
  return unary_float(
      "pow", UnaryOp::PowScalar, a, [=](float x) { return pow_scalar(x, float(e)); }, e);
}
Tensor sigmoid(const Tensor& a) {
  // 1 / (1 + e^-x), written so that neither branch overflows: for x < 0 use e^x / (1 + e^x).
  return unary_float("sigmoid", UnaryOp::Sigmoid, a, [](float x) {
    if (x >= 0) return 1.0f / (1.0f + std::exp(-x));
    const float e = std::exp(x);
    return e / (1.0f + e);
  });
}

Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
Tensor operator-(const Tensor& a) { return neg(a); }
Tensor operator+(const Tensor& a, double s) { return add(a, scalar_like(a, s)); }
Tensor operator-(const Tensor& a, double s) { return sub(a, scalar_like(a, s)); }
Tensor operator*(const Tensor& a, double s) { return mul(a, scalar_like(a, s)); }
Tensor operator/(const Tensor& a, double s) { return div(a, scalar_like(a, s)); }
Tensor operator+(double s, const Tensor& a) { return add(scalar_like(a, s), a); }
Tensor operator-(double s, const Tensor& a) { return sub(scalar_like(a, s), a); }
Tensor operator*(double s, const Tensor& a) { return mul(scalar_like(a, s), a); }
Tensor operator/(double s, const Tensor& a) { return div(scalar_like(a, s), a); }

}  // namespace engine
