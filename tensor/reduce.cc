// Reductions from ops.h. Each one moves the reduced dims to the end (a permute, then one
// contiguous copy), so every output element reduces one contiguous run of `inner` values.
#include <cmath>
#include <limits>

#include "tensor/ops.h"

namespace engine {
namespace {

struct Plan {
  Tensor moved;     // (outer, inner) contiguous: kept dims first, reduced dims last
  int64_t outer = 1, inner = 1;
  Shape out_shape;  // with or without the size-1 reduced dims, as keepdim asks
};

Plan plan_reduction(const char* op, const Tensor& a, std::vector<int64_t> dims, bool keepdim) {
  ENGINE_REQUIRE(a.defined(), "[", op, "] got an undefined tensor");
  ENGINE_REQUIRE(a.device().is_cpu(), "[", op, "] has no CUDA implementation yet (tensor on ", a.device().str(), ")");
  std::vector<bool> reduced(a.dim(), dims.empty());
  for (int64_t d : dims) {
    const int64_t w = wrap_dim(d, a.dim(), op);
    ENGINE_REQUIRE(!reduced[w], "[", op, "] dim ", w, " is listed twice");
    reduced[w] = true;
  }
  std::vector<int64_t> order;
  Plan p;
  for (int64_t d = 0; d < a.dim(); ++d)
    if (!reduced[d]) order.push_back(d), p.outer *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d)
    if (reduced[d]) order.push_back(d), p.inner *= a.size(d);
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (!reduced[d]) p.out_shape.push_back(a.size(d));
    else if (keepdim) p.out_shape.push_back(1);
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
  ENGINE_REQUIRE(a.dtype() == DType::Float32, "[", op, "] needs a float32 tensor, got ", dtype_name(a.dtype()));
}

// Sums in double: the result does not depend on how many values there are or their order
// of magnitude to within float32's own rounding, and is the same on every run.
double sum_run(const float* x, int64_t n) {
  double s = 0;
  for (int64_t i = 0; i < n; ++i) s += x[i];
  return s;
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
  Plan p = plan_reduction(op, a, dims, keepdim);
  ENGINE_REQUIRE(p.inner > 0 || p.outer == 0, "[", op, "] cannot reduce over zero elements (shape ",
                 shape_str(a.shape()), ")");
  return dispatch(a.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return reduce_runs<T, T>(p, [](const T* x, int64_t n) { return extreme_run<kMax>(x, n); });
  });
}

}  // namespace

namespace {
// Fast path for a float sum over the leading dims of a contiguous tensor (the bias
// gradient: sum over the batch): add whole rows into a double accumulator, no transpose.
bool is_leading_prefix(const std::vector<int64_t>& dims, int64_t ndim) {
  if (dims.empty() || int64_t(dims.size()) >= ndim) return false;
  std::vector<bool> seen(ndim, false);
  for (int64_t d : dims) {
    if (d < -ndim || d >= ndim) return false;
    const int64_t w = d < 0 ? d + ndim : d;
    if (seen[w]) return false;
    seen[w] = true;
  }
  for (size_t i = 0; i < dims.size(); ++i)
    if (!seen[i]) return false;
  return true;
}

Tensor sum_leading(const Tensor& a, size_t count, bool keepdim) {
  Shape out_shape;
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (size_t(d) < count) {
      outer *= a.size(d);
      if (keepdim) out_shape.push_back(1);
    } else {
      inner *= a.size(d);
      out_shape.push_back(a.size(d));
    }
  }
  std::vector<double> acc(size_t(inner), 0.0);
  const float* x = a.data<float>();
  for (int64_t r = 0; r < outer; ++r, x += inner)
    for (int64_t j = 0; j < inner; ++j) acc[j] += x[j];
  Tensor out = empty(out_shape);
  float* o = out.data<float>();
  for (int64_t j = 0; j < inner; ++j) o[j] = float(acc[j]);
  return out;
}
}  // namespace

Tensor sum(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  if (a.defined() && a.device().is_cpu() && a.dtype() == DType::Float32 && a.is_contiguous() &&
      is_leading_prefix(dims, a.dim()))
    return sum_leading(a, dims.size(), keepdim);
  Plan p = plan_reduction("sum", a, dims, keepdim);
  if (a.dtype() == DType::Int64) {
    return reduce_runs<int64_t, int64_t>(p, [](const int64_t* x, int64_t n) {
      int64_t s = 0;
      for (int64_t i = 0; i < n; ++i) s += x[i];
      return s;
    });
  }
  return reduce_runs<float, float>(p, [](const float* x, int64_t n) { return float(sum_run(x, n)); });
}

Tensor mean(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) {
  require_float("mean", a);
  Plan p = plan_reduction("mean", a, dims, keepdim);
  return reduce_runs<float, float>(p, [](const float* x, int64_t n) {
    return n == 0 ? std::numeric_limits<float>::quiet_NaN() : float(sum_run(x, n) / double(n));
  });
}

Tensor var(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  require_float("var", a);
  Plan p = plan_reduction("var", a, dims, keepdim);
  // Two passes (mean, then squared deviations) in double: stable where E[x^2] - E[x]^2
  // would cancel catastrophically.
  return reduce_runs<float, float>(p, [=](const float* x, int64_t n) {
    if (n - correction <= 0) return std::numeric_limits<float>::quiet_NaN();
    const double m = sum_run(x, n) / double(n);
    double ss = 0;
    for (int64_t i = 0; i < n; ++i) ss += (x[i] - m) * (x[i] - m);
    return float(ss / double(n - correction));
  });
}

Tensor max(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) { return extreme<true>("max", a, dims, keepdim); }
Tensor min(const Tensor& a, const std::vector<int64_t>& dims, bool keepdim) { return extreme<false>("min", a, dims, keepdim); }

Tensor argmax(const Tensor& a, int64_t dim, bool keepdim) {
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
          if (std::isnan(x[i])) { best = i; break; }
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
    if (d < lead) dims.push_back(d);
    else if (shape[d - lead] == 1 && grad.size(d) != 1) dims.push_back(d);
    else ENGINE_REQUIRE(shape[d - lead] == grad.size(d), "[sum_to] cannot sum shape ", shape_str(grad.shape()),
                        " down to ", shape_str(shape));
  }
  if (dims.empty()) return grad.reshape(shape);
  return sum(grad, dims, true).reshape(shape);
}

}  // namespace engine
