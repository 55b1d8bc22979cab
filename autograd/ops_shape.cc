// Differentiable reductions, views and copies. A view's backward puts the gradient back
// where the view's elements came from; a reduction's spreads it over what was reduced.
#include "autograd/ops.h"
#include "tensor/ops.h"

namespace engine::autograd {

using Grads = std::vector<Tensor>;

namespace {

// The reduced result's shape with keepdim=true, so a gradient can broadcast back over the
// input: `shape` with every reduced dim set to 1.
Shape kept_shape(const Shape& shape, const std::vector<int64_t>& dims) {
  Shape s = shape;
  if (dims.empty()) return Shape(shape.size(), 1);
  for (int64_t d : dims) s[wrap_dim(d, int64_t(shape.size()), "reduce")] = 1;
  return s;
}

int64_t reduced_count(const Shape& shape, const std::vector<int64_t>& dims) {
  return numel(shape) / std::max<int64_t>(numel(kept_shape(shape, dims)), 1);
}

// Backward of a view: a zero tensor of the input's shape, with the gradient written into
// the same view of it that the forward took.
template <class View>
Tensor scatter_into_zeros(const Shape& input_shape, const Tensor& g, View view) {
  Tensor z = zeros(input_shape, g.dtype(), g.device());
  view(z).copy_(g);
  return z;
}

}  // namespace

Variable sum(const Variable& a, const std::vector<int64_t>& dims, bool keepdim) {
  const Shape sa = a.shape(), kept = kept_shape(sa, dims);
  return record("sum", engine::sum(a.data(), dims, keepdim), {a}, [sa, kept](const Tensor& g, const Needs&) {
    return Grads{g.reshape(kept).expand(sa)};  // every summed element gets the gradient once
  });
}

Variable mean(const Variable& a, const std::vector<int64_t>& dims, bool keepdim) {
  const Shape sa = a.shape(), kept = kept_shape(sa, dims);
  const double count = double(reduced_count(sa, dims));
  return record("mean", engine::mean(a.data(), dims, keepdim), {a}, [sa, kept, count](const Tensor& g, const Needs&) {
    return Grads{(g / count).reshape(kept).expand(sa)};  // d mean / dx_i = 1/n
  });
}

namespace {
template <bool kMax>
Variable extreme(const Variable& a, const std::vector<int64_t>& dims, bool keepdim) {
  const Tensor x = a.data();
  const Tensor out = kMax ? engine::max(x, dims, keepdim) : engine::min(x, dims, keepdim);
  const Shape kept = kept_shape(x.shape(), dims);
  return record(kMax ? "max" : "min", out, {a}, [x, out, kept, dims](const Tensor& g, const Needs&) {
    // The gradient goes to the elements equal to the result, split evenly among ties; a
    // NaN result came from the NaNs, so they take it (NaN == NaN is false).
    const Tensor r = out.reshape(kept);
    const Tensor mask = engine::eq(x, r) + engine::ne(x, x) * engine::ne(r, r);
    const Tensor count = engine::sum(mask, dims, true);
    return Grads{g.reshape(kept) * mask / count};
  });
}
}  // namespace

Variable max(const Variable& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme<true>(a, dims, keepdim);
}
Variable min(const Variable& a, const std::vector<int64_t>& dims, bool keepdim) {
  return extreme<false>(a, dims, keepdim);
}

Variable var(const Variable& a, const std::vector<int64_t>& dims, bool keepdim, int64_t correction) {
  const Tensor x = a.data();
  const Shape kept = kept_shape(x.shape(), dims);
  const double denom = engine::var_denominator(reduced_count(x.shape(), dims), correction);
  return record("var", engine::var(x, dims, keepdim, correction), {a},
                [x, kept, dims, denom](const Tensor& g, const Needs&) {
                  // var = sum (x - m)^2 / denom  =>  d var / dx_i = 2 (x_i - m) / denom
                  // (the terms through m sum to zero, since sum (x_i - m) = 0).
                  const Tensor centered = x - engine::mean(x, dims, true);
                  return Grads{g.reshape(kept) * centered * (2.0 / denom)};
                });
}

Variable to(const Variable& a, DType dtype) {
  if (a.data().dtype() == dtype) return a;
  const DType from = a.data().dtype();
  return record("to", a.data().to(dtype), {a}, [from](const Tensor& g, const Needs&) { return Grads{g.to(from)}; });
}

Variable reshape(const Variable& a, const Shape& shape) {
  const Shape sa = a.shape();
  return record("reshape", a.data().reshape(shape), {a},
                [sa](const Tensor& g, const Needs&) { return Grads{g.reshape(sa)}; });
}

Variable permute(const Variable& a, const std::vector<int64_t>& dims) {
  const Tensor out = a.data().permute(dims);
  std::vector<int64_t> inverse(dims.size());
  for (size_t i = 0; i < dims.size(); ++i) inverse[wrap_dim(dims[i], int64_t(dims.size()), "permute")] = int64_t(i);
  return record("permute", out, {a}, [inverse](const Tensor& g, const Needs&) { return Grads{g.permute(inverse)}; });
}

Variable transpose(const Variable& a, int64_t d0, int64_t d1) {
  return record("transpose", a.data().transpose(d0, d1), {a},
                [d0, d1](const Tensor& g, const Needs&) { return Grads{g.transpose(d0, d1)}; });
}

Variable narrow(const Variable& a, int64_t dim, int64_t start, int64_t length) {
  const Shape sa = a.shape();
  return record("narrow", a.data().narrow(dim, start, length), {a}, [=](const Tensor& g, const Needs&) {
    return Grads{scatter_into_zeros(sa, g, [&](const Tensor& z) { return z.narrow(dim, start, length); })};
  });
}

Variable slice(const Variable& a, int64_t dim, int64_t start, int64_t end, int64_t step) {
  const Shape sa = a.shape();
  return record("slice", a.data().slice(dim, start, end, step), {a}, [=](const Tensor& g, const Needs&) {
    return Grads{scatter_into_zeros(sa, g, [&](const Tensor& z) { return z.slice(dim, start, end, step); })};
  });
}

Variable select(const Variable& a, int64_t dim, int64_t index) {
  const Shape sa = a.shape();
  return record("select", a.data().select(dim, index), {a}, [=](const Tensor& g, const Needs&) {
    return Grads{scatter_into_zeros(sa, g, [&](const Tensor& z) { return z.select(dim, index); })};
  });
}

Variable expand(const Variable& a, const Shape& shape) {
  const Shape sa = a.shape();
  return record("expand", a.data().expand(shape), {a},
                [sa](const Tensor& g, const Needs&) { return Grads{sum_to(g, sa)}; });
}

Variable squeeze(const Variable& a, int64_t dim) {
  const Shape sa = a.shape();
  return record("squeeze", a.data().squeeze(dim), {a},
                [sa](const Tensor& g, const Needs&) { return Grads{g.reshape(sa)}; });
}

Variable unsqueeze(const Variable& a, int64_t dim) {
  const Shape sa = a.shape();
  return record("unsqueeze", a.data().unsqueeze(dim), {a},
                [sa](const Tensor& g, const Needs&) { return Grads{g.reshape(sa)}; });
}

Variable contiguous(const Variable& a) {
  return record("contiguous", a.data().contiguous(), {a}, [](const Tensor& g, const Needs&) { return Grads{g}; });
}

}  // namespace engine::autograd
