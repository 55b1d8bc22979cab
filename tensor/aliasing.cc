// Which tensors name the same memory (tensor.h): what in-place writes and the collectives
// check before writing one tensor while reading another.
#include "tensor/tensor.h"

namespace engine {
namespace {
// The last element a view reaches, from its storage's start. Strides are never negative
// and every view was checked to lie inside its storage when made, so the sum fits.
int64_t last_element(const Tensor& t) {
  int64_t last = t.offset();
  for (size_t d = 0; d < t.shape().size(); ++d) last += (t.shape()[d] - 1) * t.strides()[d];
  return last;
}
}  // namespace

bool share_memory(const Tensor& a, const Tensor& b) {
  if (!a.defined() || !b.defined() || a.numel() == 0 || b.numel() == 0 || a.storage() != b.storage()) return false;
  // Byte ranges [first, end): each view's first element to just past its last.
  const int64_t ea = int64_t(dtype_size(a.dtype())), eb = int64_t(dtype_size(b.dtype()));
  return a.offset() * ea < (last_element(b) + 1) * eb && b.offset() * eb < (last_element(a) + 1) * ea;
}

bool same_view(const Tensor& a, const Tensor& b) {
  return a.defined() && b.defined() && a.storage() == b.storage() && a.offset() == b.offset() &&
         a.shape() == b.shape() && a.strides() == b.strides() && a.dtype() == b.dtype();
}

void require_distinct_elements(const Tensor& t, const char* op) {
  ENGINE_REQUIRE(!repeats_elements(t.shape(), t.strides()), "[", op, "] cannot write in place into shape ",
                 shape_str(t.shape()), " with strides ", shape_str(t.strides()),
                 ": several of its elements are one element in memory (an expanded view); clone() it first");
}

}  // namespace engine
