// Reductions from ops.h. Float sums, means and variances accumulate in place (Slots,
// below); max, min, argmax and int64 sums move the reduced dims to the end (a permute, then
// one contiguous copy), so every output element reduces one contiguous run of values.
#include <immintrin.h>

#include <cmath>
#include <limits>
#include <type_traits>

#include "tensor/cpu_features.h"
#include "tensor/cuda_ops.h"
#include "tensor/loops.h"
#include "tensor/ops.h"

namespace engine {
namespace {

// Checks the input and returns, per dim of `a`, whether it is reduced (all dims when
// `dims` is empty).
std::vector<bool> reduced_dims(const char* op, const Tensor& a, const std::vector<int64_t>& dims) {
  ENGINE_REQUIRE(a.defined(), "[", op, "] got an undefined tensor");
  std::vector<bool> reduced(a.dim(), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, a.dim(), op);
    ENGINE_REQUIRE(!reduced[w], "[", op, "] dim ", w, " is listed twice");
    reduced[w] = true;
  }
  return reduced;
}

struct Plan {
  Tensor moved;  // (outer, inner) contiguous: kept dims first, reduced dims last
  int64_t outer = 1, inner = 1;
  Shape out_shape;  // with or without the size-1 reduced dims, as keepdim asks
};

Plan plan_reduction(const char* op, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<bool> reduced = reduced_dims(op, a, dims);
  std::vector<int64_t> order;
  Plan p;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!reduced[d]) order.push_back(d), p.outer *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d)
    if (reduced[d]) order.push_back(d), p.inner *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (!reduced[d])
      p.out_shape.push_back(a.size(d));
    else if (keepdim)
      p.out_shape.push_back(1);
  }
  p.moved = a.permute(order).contiguous();
  return p;
}

// Applies f(run pointer, run length) -> R to every run; returns the (out_shape) result.
template <class T, class R, class F>
Tensor reduce_runs(const Plan& p, F f) {
  Tensor out = empty(p.out_shape, dtype_of<R>());
  const T* in = p.moved.data<T>();
  R* o = out.data<R>();
  for (int64_t i = 0; i < p.outer; ++i) o[i] = f(in + i * p.inner, p.inner);
  return out;
}

void require_float(const char* op, const Tensor& a) {
  ENGINE_REQUIRE(a.defined(), "[", op, "] got an undefined tensor");
  ENGINE_REQUIRE(is_floating(a.dtype()), "[", op, "] needs a floating-point tensor, got ", dtype_name(a.dtype()));
}

// bfloat16 and float16 reduce in float32 (each value widened exactly, sums in double as
// below) and the result is rounded once: summing in 16 bits would lose every addend
// smaller than 1/256 of the running total (bfloat16's 8-bit significand).
bool half(const Tensor& a) { return a.defined() && is_half(a.dtype()); }
Tensor f32(const Tensor& a) { return a.to(DType::Float32); }

// Float sums without moving data: walk the input in memory order and add each element
// into its output slot. A slot's stride is 0 along reduced dims, so every element of a
// reduced run lands in the same slot. Accumulating in double keeps the result accurate
// and independent of the walk order to within float32 rounding; the order is fixed, so
// the result is the same on every run.
struct Slots {
  Strides slot_strides;  // per input dim: 0 if reduced, else the row-major stride among kept dims
  Shape out_shape;
  int64_t slots = 1, count = 1;  // output elements; input elements per output element
};

Slots plan_slots(const char* op, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  const std::vector<bool> reduced = reduced_dims(op, a, dims);
  Slots s;
  s.slot_strides.assign(a.dim(), 0);
  for (int64_t d = a.dim() - 1; d >= 0; --d) {
    if (reduced[d]) {
      s.count *= a.size(d);
    } else {
      s.slot_strides[d] = s.slots;
      s.slots *= a.size(d);
    }
  }
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (!reduced[d])
      s.out_shape.push_back(a.size(d));
    else if (keepdim)
      s.out_shape.push_back(1);
  }
  return s;
}

// slot[i] += x[i] in double for i < n: 8 at a time with AVX-512 (each slot's adds are the
// same ones in the same order, so the sums are the same as the loop's).
__attribute__((target("avx512f"))) void add_widened_avx512(double* slot, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm512_storeu_pd(slot + i,
                     _mm512_add_pd(_mm512_loadu_pd(slot + i), _mm512_maskz_cvtps_pd(0xFF, _mm256_loadu_ps(x + i))));
  for (; i < n; ++i) slot[i] += double(x[i]);
}

// The sum's f: each value as it is, widened.
struct Widen {
  double operator()(float x, int64_t) const { return double(x); }
};

// acc[slot] = sum over the slot's input elements x of f(x, slot). Runs that all land in
// one slot (reducing the innermost dim) sum into a register first; runs along a row of
// slots (reducing an outer dim, as a bias's gradient sums over the batch) add a row at a time.
template <class F>
std::vector<double> accumulate(const Tensor& a, const Slots& s, F f) {
  std::vector<double> acc(size_t(s.slots), 0.0);
  const float* base = static_cast<const float*>(a.storage()->data());
  detail::for_each_run<2>(a.shape(), {a.strides(), s.slot_strides}, {a.offset(), 0},
                          [&](const std::array<int64_t, 2>& o, int64_t n, const std::array<int64_t, 2>& step) {
                            const float* x = base + o[0];
                            double* slot = acc.data() + o[1];
                            if (step[1] == 0) {
                              double run = 0;
                              for (int64_t i = 0; i < n; ++i) run += f(x[i * step[0]], o[1]);
                              *slot += run;
                            } else if (std::is_same_v<F, Widen> && step[0] == 1 && step[1] == 1 && cpu_has_avx512()) {
                              add_widened_avx512(slot, x, n);
                            } else {
                              for (int64_t i = 0; i < n; ++i)
                                slot[i * step[1]] += f(x[i * step[0]], o[1] + i * step[1]);
                            }
                          });
  return acc;
}

template <class F>
Tensor to_tensor(const Slots& s, F value) {
  Tensor out = empty(s.out_shape);
  float* o = out.data<float>();
  for (int64_t i = 0; i < s.slots; ++i) o[i] = float(value(i));
  return out;
}

template <bool kMax, class T>
T extreme_run(const T* x, int64_t n) {
  T best = x[0];
  for (int64_t i = 1; i < n; ++i) {
    if constexpr (std::is_floating_point_v<T>) {
      if (std::isnan(best)) return best;  // NaN propagates, as in PyTorch
      if (std::isnan(x[i])) return x[i];
    }
    if (kMax ? x[i] > best : x[i] < best) best = x[i];
  }
  return best;
}

template <bool kMax>
Tensor extreme(const char* op, const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (half(a)) return extreme<kMax>(op, f32(a), dims, keepdim).to(a.dtype());
  if (cuda_ops::on_cuda(a)) {
    const std::vector<bool> reduced = reduced_dims(op, a, dims);
    for (int64_t d = 0; d < a.dim(); ++d)
      ENGINE_REQUIRE(!reduced[d] || a.size(d) > 0, "[", op, "] cannot reduce over zero elements (shape ",
                     shape_str(a.shape()), ")");
    return cuda_ops::reduce(kMax ? cuda::ReduceOp::Max : cuda::ReduceOp::Min, a, reduced, keepdim);
  }
  Plan p = plan_reduction(op, a, dims, keepdim);
  ENGINE_REQUIRE(p.inner > 0 || p.outer == 0, "[", op, "] cannot reduce over zero elements (shape ",
                 shape_str(a.shape()), ")");
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return reduce_runs<T, T>(p, [](const T* x, int64_t n) { return extreme_run<kMax>(x, n); });
  });
}

}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (half(a)) return sum(f32(a), dims, keepdim).to(a.dtype());
  if (cuda_ops::on_cuda(a)) return cuda_ops::reduce(cuda::ReduceOp::Sum, a, reduced_dims("sum", a, dims), keepdim);
  if (a.defined() && a.dtype() == DType::Float32) {
    Slots s = plan_slots("sum", a, dims, keepdim);
    const std::vector<double> acc = accumulate(a, s, Widen{});
    return to_tensor(s, [&](int64_t i) { return acc[i]; });
  }
  Plan p = plan_reduction("sum", a, dims, keepdim);
  // int64 sums wrap modulo 2^64, as PyTorch's (adding as uint64 keeps C++ defined).
  return reduce_runs<int64_t, int64_t>(p, [](const int64_t* x, int64_t n) {
    uint64_t s = 0;
    for (int64_t i = 0; i < n; ++i) s += uint64_t(x[i]);
    return int64_t(s);
  });
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  require_float("mean", a);
  if (half(a)) return mean(f32(a), dims, keepdim).to(a.dtype());
  if (cuda_ops::on_cuda(a))
    return cuda_ops::reduce(cuda::ReduceOp::Sum, a, reduced_dims("mean", a, dims), keepdim, true);
  Slots s = plan_slots("mean", a, dims, keepdim);
  const std::vector<double> acc = accumulate(a, s, Widen{});
  return to_tensor(
      s, [&](int64_t i) { return s.count == 0 ? std::numeric_limits<double>::quiet_NaN() : acc[i] / double(s.count); });
}

double var_denominator(int64_t count, int64_t correction) {
  // PyTorch's degrees of freedom, max(0, N - correction), in double so that no correction
  // overflows: with none left the variance is inf (or NaN where every deviation is 0).
  return std::max(0.0, double(count) - double(correction));
}

Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  require_float("var", a);
  if (half(a)) return var(f32(a), dims, keepdim, correction).to(a.dtype());
  if (cuda_ops::on_cuda(a)) {  // two passes, as below: the mean, then the squared deviations
    const Slots s = plan_slots("var", a, dims, keepdim);
    const Tensor d = a - mean(a, dims, true);
    return sum(d * d, dims, keepdim) / var_denominator(s.count, correction);
  }
  Slots s = plan_slots("var", a, dims, keepdim);
  // Two passes (mean, then squared deviations) in double: stable where E[x^2] - E[x]^2
  // would cancel catastrophically.
  std::vector<double> m = accumulate(a, s, Widen{});
  for (double& v : m) v /= double(std::max<int64_t>(s.count, 1));
  const std::vector<double> ss = accumulate(a, s, [&](float x, int64_t slot) {
    const double d = double(x) - m[slot];
    return d * d;
  });
  const double denom = var_denominator(s.count, correction);
  return to_tensor(s, [&](int64_t i) { return ss[i] / denom; });
}

bool all_finite(const Tensor& a) {
  ENGINE_REQUIRE(a.defined(), "[all_finite] tensor is undefined");
  if (!is_floating(a.dtype()) || a.numel() == 0) return true;
  if (a.dtype() != DType::Float32 || cuda_ops::on_cuda(a) || !a.is_contiguous())
    return std::isfinite(max(abs(a.to(DType::Float32))).item());  // max passes a NaN on
  // A float32 is inf or NaN exactly when its 8 exponent bits are all ones. OR-ing a flag
  // per element, with no early exit, lets the compiler vectorise the loop.
  const auto* bits = reinterpret_cast<const uint32_t*>(a.bytes());
  uint32_t bad = 0;
  for (int64_t i = 0, n = a.numel(); i < n; ++i) bad |= uint32_t((bits[i] & 0x7f800000u) == 0x7f800000u);
  return bad == 0;
}

Tensor max(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme<true>("max", a, dims, keepdim);
}
Tensor min(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme<false>("min", a, dims, keepdim);
}

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
  if (half(a)) return argmax(f32(a), dim, keepdim);
  if (cuda_ops::on_cuda(a)) {
    const std::vector<bool> reduced = reduced_dims("argmax", a, {dim});
    ENGINE_REQUIRE(a.size(dim) > 0, "[argmax] cannot take argmax over an empty dim (shape ", shape_str(a.shape()), ")");
    return cuda_ops::reduce(cuda::ReduceOp::ArgMax, a, reduced, keepdim);
  }
  Plan p = plan_reduction("argmax", a, {dim}, keepdim);
  ENGINE_REQUIRE(p.inner > 0 || p.outer == 0, "[argmax] cannot take argmax over an empty dim (shape ",
                 shape_str(a.shape()), ")");
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return reduce_runs<T, int64_t>(p, [](const T* x, int64_t n) {
      int64_t best = 0;
      for (int64_t i = 1; i < n; ++i) {
        if constexpr (std::is_floating_point_v<T>) {
          if (std::isnan(x[best])) break;
          if (std::isnan(x[i])) {
            best = i;
            break;
          }
        }
        if (x[i] > x[best]) best = i;
      }
      return best;
    });
  });
}

Tensor argmax(const Tensor& a) { return argmax(a.reshape({-1}), 0, false); }

Tensor sum_to(const Tensor& grad, const Shape& shape) {
  if (grad.shape() == shape) return grad;
  ENGINE_REQUIRE(grad.dim() >= int64_t(shape.size()), "[sum_to] cannot sum shape ", shape_str(grad.shape()),
                 " down to ", shape_str(shape));
  const int64_t lead = grad.dim() - int64_t(shape.size());
  std::vector<int64_t> dims;
  for (int64_t d = 0; d < grad.dim(); ++d) {
    if (d < lead)
      dims.push_back(d);
    else if (shape[d - lead] == 1 && grad.size(d) != 1)
      dims.push_back(d);
    else
      ENGINE_REQUIRE(shape[d - lead] == grad.size(d), "[sum_to] cannot sum shape ", shape_str(grad.shape()),
                     " down to ", shape_str(shape));
  }
  if (dims.empty()) return grad.reshape(shape);
  return sum(grad, dims, true).reshape(shape);
}

}  // namespace engine
