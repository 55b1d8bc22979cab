#include "tensor/shape.h"

#include "tensor/check.h"

namespace engine {

int64_t numel(const Shape& shape) {
  // A shape read from a file or built by expand() can name more elements than int64 holds;
  // the wrapped product would make every loop over the tensor silently wrong. The sizes
  // other than 0 must multiply within int64 even when a 0 makes the tensor empty, so that
  // strides and the products other code forms from the sizes stay in range too (PyTorch
  // allows such empty shapes; they have no use).
  int64_t n = 1;
  bool overflow = false, empty = false;
  for (int64_t d : shape) {
    if (d == 0)
      empty = true;
    else
      overflow |= __builtin_mul_overflow(n, d, &n);
  }
  ENGINE_REQUIRE(!overflow, "[numel] shape ", shape_str(shape), " has more elements than int64 can count");
  return empty ? 0 : n;
}

Strides contiguous_strides(const Shape& shape) {
  Strides strides(shape.size());
  int64_t stride = 1;
  for (size_t i = shape.size(); i-- > 0;) {
    strides[i] = stride;
    stride *= std::max<int64_t>(shape[i], 1);
  }
  return strides;
}

std::string shape_str(const Shape& shape) {
  std::string s = "(";
  for (size_t i = 0; i < shape.size(); ++i) {
    if (i) s += ",";
    s += std::to_string(shape[i]);
  }
  return s + (shape.size() == 1 ? ",)" : ")");  // (3,) as Python writes a 1-tuple
}

Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op) {
  const size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    // Walk from the last dim; a missing leading dim acts as 1.
    const int64_t da = i < a.size() ? a[a.size() - 1 - i] : 1;
    const int64_t db = i < b.size() ? b[b.size() - 1 - i] : 1;
    ENGINE_REQUIRE(da == db || da == 1 || db == 1, "[", op, "] shapes ", shape_str(a), " and ", shape_str(b),
                   " do not broadcast: dim ", int64_t(n - 1 - i), " is ", da, " vs ", db);
    out[n - 1 - i] = da == 1 ? db : da;
  }
  return out;
}

bool repeats_elements(const Shape& shape, const Strides& strides) {
  for (size_t i = 0; i < shape.size(); ++i)
    if (shape[i] > 1 && strides[i] == 0) return true;
  return false;
}

int64_t wrap_dim(int64_t dim, int64_t ndim, const char* op) {
  const int64_t lo = ndim == 0 ? -1 : -ndim, hi = ndim == 0 ? 0 : ndim - 1;
  ENGINE_REQUIRE(dim >= lo && dim <= hi, "[", op, "] dim ", dim, " is out of range for a ", ndim,
                 "-D tensor (expected ", lo, " to ", hi, ")");
  return dim < 0 ? dim + std::max<int64_t>(ndim, 1) : dim;
}

}  // namespace engine
