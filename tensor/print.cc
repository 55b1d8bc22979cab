// Printing a tensor the way a learner wants to read it:
//
//   tensor([[ 0.0000,  1.0000,  2.0000],
//           [ 3.0000,  4.0000,  5.0000]], shape=(2,3), dtype=float32, device=cpu)
//
// Past 1000 elements, each dim shows its first and last 3 entries with "..." between.
#include <cmath>
#include <cstdio>
#include <ostream>
#include <string>

#include "tensor/tensor.h"

namespace engine {
namespace {

constexpr int64_t kElideAbove = 1000;  // elements
constexpr int64_t kEdgeItems = 3;

std::string format_value(double v, DType dtype, bool sci) {
  char buf[64];
  if (std::isnan(v)) return "nan";  // as PyTorch prints it, whatever the NaN's sign bit (0/0 sets it)
  if (dtype == DType::Int64)
    std::snprintf(buf, sizeof buf, "%lld", (long long)v);
  else if (sci)
    std::snprintf(buf, sizeof buf, "%.4e", v);
  else
    std::snprintf(buf, sizeof buf, "%.4f", v);
  return buf;
}

struct Printer {
  const Tensor& t;  // contiguous CPU copy
  bool elide, sci;
  size_t width;
  std::ostream& out;

  void rows(int64_t d, int64_t offset, int indent) {
    const Shape& s = t.shape();
    const int64_t stride = t.strides()[d];
    out << "[";
    const bool cut = elide && s[d] > 2 * kEdgeItems;
    for (int64_t i = 0; i < s[d]; ++i) {
      if (cut && i == kEdgeItems) {
        out << (d + 1 == t.dim() ? "..., " : "...,\n" + std::string(indent + 1, ' '));
        i = s[d] - kEdgeItems;
      }
      if (d + 1 == t.dim()) {
        std::string v = dispatch_storage(t.dtype(), [&](auto zero) {
          return format_value(double(t.data<decltype(zero)>()[offset + i * stride]), t.dtype(), sci);
        });
        out << std::string(width - std::min(width, v.size()), ' ') << v;
      } else {
        rows(d + 1, offset + i * stride, indent + 1);
      }
      if (i + 1 < s[d]) {
        out << ",";
        if (d + 1 == t.dim())
          out << " ";
        else
          out << std::string(t.dim() - d - 1, '\n') << std::string(indent + 1, ' ');
      }
    }
    out << "]";
  }
};

}  // namespace

std::ostream& operator<<(std::ostream& out, const Tensor& t0) {
  if (!t0.defined()) return out << "tensor(undefined)";
  const std::string meta =
      "shape=" + shape_str(t0.shape()) + ", dtype=" + dtype_name(t0.dtype()) + ", device=" + t0.device().str();
  const Tensor t = t0.to(Device::cpu()).contiguous();
  out << "tensor(";
  if (t.numel() == 0) return out << "[], " << meta << ")";
  // Pick one format and one column width for all values so columns line up.
  // The range is that of the finite values: a nan or inf beside 1e-40 and 1e30 must not
  // turn the others into a fixed format that shows them as 0.0000 and 31 digits.
  double maxabs = 0, minabs = INFINITY;
  std::vector<double> vals = dispatch_storage(t.dtype(), [&](auto zero) {
    using T = decltype(zero);
    return std::vector<double>(t.data<T>(), t.data<T>() + t.numel());
  });
  for (double v : vals) {
    if (!std::isfinite(v)) continue;
    maxabs = std::max(maxabs, std::fabs(v));
    if (v != 0) minabs = std::min(minabs, std::fabs(v));
  }
  const bool sci = is_floating(t.dtype()) && (maxabs >= 1e6 || (minabs < 1e-4 && maxabs > 0));
  size_t width = 0;
  for (double v : vals) width = std::max(width, format_value(v, t.dtype(), sci).size());
  if (t.dim() == 0) {
    out << format_value(vals[0], t.dtype(), sci);
  } else {
    Printer p{t, t.numel() > kElideAbove, sci, width, out};
    p.rows(0, 0, 7);  // 7 = strlen("tensor(")
  }
  return out << ", " << meta << ")";
}

}  // namespace engine
