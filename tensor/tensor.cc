#include "tensor/tensor.h"

#include <algorithm>
#include <cstring>
#include <numeric>

#include "tensor/cuda/runtime.h"
#include "tensor/cuda_ops.h"
#include "tensor/half_convert.h"
#include "tensor/loops.h"

namespace engine {

namespace {
// Every element a view can name lies inside its storage: the first at `offset`, the last at
// offset + sum((size - 1) * stride), all in elements. A view built with a wrong offset (an
// index past the end, a start + length that wrapped) would read or write other memory.
void check_inside_storage(const Storage& storage, const Shape& shape, const Strides& strides, int64_t offset,
                          DType dtype) {
  if (engine::numel(shape) == 0) return;
  int64_t last = offset;
  bool overflow = offset < 0;
  for (size_t i = 0; i < shape.size(); ++i) {
    int64_t reach = 0;
    overflow |= strides[i] < 0 || __builtin_mul_overflow(shape[i] - 1, strides[i], &reach) ||
                __builtin_add_overflow(last, reach, &last);
  }
  const int64_t elements = int64_t(storage.nbytes() / dtype_size(dtype));
  ENGINE_REQUIRE(!overflow && last < elements, "[view] shape ", shape_str(shape), " with strides ", shape_str(strides),
                 " at offset ", offset, " reaches past its storage of ", elements, " ", dtype_name(dtype), " elements");
}
}  // namespace

Tensor::Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype)
    : storage_(std::move(storage)),
      shape_(std::move(shape)),
      strides_(std::move(strides)),
      offset_(offset),
      dtype_(dtype) {
  ENGINE_CHECK(shape_.size() == strides_.size());
  // Every tensor's element count fits int64 (numel throws otherwise), so no loop over it wraps.
  if (storage_) check_inside_storage(*storage_, shape_, strides_, offset_, dtype_);
}

Device Tensor::device() const { return storage_ ? storage_->device() : Device::cpu(); }

int64_t Tensor::size(int64_t d) const { return shape_[wrap_dim(d, dim(), "size")]; }

bool Tensor::is_contiguous() const {
  int64_t expected = 1;
  for (int64_t i = dim() - 1; i >= 0; --i) {
    if (shape_[i] == 1) continue;  // a size-1 dim's stride never matters
    if (strides_[i] != expected) return false;
    expected *= shape_[i];
  }
  return true;
}

char* Tensor::bytes() const {
  ENGINE_REQUIRE(defined(), "[bytes] tensor is undefined");
  ENGINE_REQUIRE(!storage_->released(),
                 "[bytes] this tensor's memory was released (an FSDP unit's parameters are "
                 "only there during its forward and backward)");
  return static_cast<char*>(storage_->data()) + size_t(offset_) * dtype_size(dtype_);
}

double Tensor::item() const {
  ENGINE_REQUIRE(numel() == 1, "[item] needs a tensor with one element, got shape ", shape_str(shape_));
  if (device().is_cuda()) return to(Device::cpu()).item();  // waits for the GPU
  return dispatch_storage(dtype_, [&](auto zero) { return double(data<decltype(zero)>()[0]); });
}

double Tensor::at(std::initializer_list<int64_t> index) const {
  ENGINE_REQUIRE(defined(), "[at] tensor is undefined");
  if (device().is_cuda()) return to(Device::cpu()).at(index);
  ENGINE_REQUIRE(int64_t(index.size()) == dim(), "[at] got ", index.size(), " indices for a ", dim(),
                 "-D tensor of shape ", shape_str(shape_));
  int64_t off = 0, d = 0;
  for (int64_t i : index) {
    ENGINE_REQUIRE(i >= -shape_[d] && i < shape_[d], "[at] index ", i, " is out of range for dim ", d, " of size ",
                   shape_[d]);
    off += (i < 0 ? i + shape_[d] : i) * strides_[d];
    ++d;
  }
  return dispatch_storage(dtype_, [&](auto zero) { return double(data<decltype(zero)>()[off]); });
}

template <class T>
std::vector<T> Tensor::to_vector() const {
  ENGINE_REQUIRE(defined(), "[to_vector] tensor is undefined");
  if (device().is_cuda()) return to(Device::cpu()).to_vector<T>();
  Tensor c = to(dtype_of<T>()).contiguous();
  const T* p = c.data<T>();
  return std::vector<T>(p, p + c.numel());
}
template std::vector<float> Tensor::to_vector<float>() const;
template std::vector<int64_t> Tensor::to_vector<int64_t>() const;
template std::vector<bfloat16> Tensor::to_vector<bfloat16>() const;
template std::vector<float16> Tensor::to_vector<float16>() const;

// ---------------------------------------------------------------------------------------
// Views

namespace {
// Resolves one -1 in `shape` from the element count, and checks the count matches.
Shape infer_shape(Shape shape, int64_t count, const Shape& from, const char* op) {
  int64_t infer = -1;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == -1) {
      ENGINE_REQUIRE(infer < 0, "[", op, "] only one dim can be -1, got ", shape_str(shape));
      infer = int64_t(i);
    } else {
      ENGINE_REQUIRE(shape[i] >= 0, "[", op, "] negative size in ", shape_str(shape));
    }
  }
  Shape given = shape;
  if (infer >= 0) given.erase(given.begin() + infer);
  int64_t known = 0;
  try {
    known = numel(given);  // the sizes must multiply within int64
  } catch (const Error&) {
    throw Error("[" + std::string(op) + "] shape " + shape_str(shape) + " has more elements than int64 can count");
  }
  if (infer >= 0) {
    ENGINE_REQUIRE(known != 0 && count % known == 0, "[", op, "] cannot infer -1 in ", shape_str(shape), " for ", count,
                   " elements of shape ", shape_str(from));
    shape[infer] = count / known;
    known *= shape[infer];
  }
  ENGINE_REQUIRE(known == count, "[", op, "] shape ", shape_str(shape), " has ", known,
                 " elements but the tensor of shape ", shape_str(from), " has ", count);
  return shape;
}

// Strides for viewing (old_shape, old_strides) as new_shape without copying, if possible:
// each run of old dims that is contiguous in memory can be re-split freely.
bool view_strides(const Shape& old_shape, const Strides& old_strides, const Shape& new_shape, Strides* out) {
  Strides ns(new_shape.size());
  if (numel(old_shape) == 0) {
    *out = contiguous_strides(new_shape);
    return true;
  }
  // Drop size-1 dims from the old layout; they carry no stride information.
  Shape os;
  Strides ost;
  for (size_t i = 0; i < old_shape.size(); ++i)
    if (old_shape[i] != 1) {
      os.push_back(old_shape[i]);
      ost.push_back(old_strides[i]);
    }
  size_t oi = 0, ni = 0;
  while (ni < new_shape.size()) {
    if (new_shape[ni] == 1) {
      ns[ni++] = 1;
      continue;
    }
    if (oi >= os.size()) return false;
    // Take a chunk of old dims that is contiguous in memory...
    size_t oj = oi;
    int64_t chunk = os[oi];
    while (oj + 1 < os.size() && os.size() && ost[oj] == ost[oj + 1] * os[oj + 1]) {
      ++oj;
      chunk *= os[oj];
    }
    // ...and split it into the next new dims, which must multiply to the same count.
    int64_t stride = ost[oj], prod = 1;
    std::vector<size_t> dims;
    while (ni < new_shape.size() && prod < chunk) {
      prod *= new_shape[ni];
      dims.push_back(ni++);
    }
    if (prod != chunk) return false;
    for (size_t k = dims.size(); k-- > 0;) {
      ns[dims[k]] = stride;
      stride *= new_shape[dims[k]];
    }
    while (ni < new_shape.size() && new_shape[ni] == 1) ns[ni++] = 1;
    oi = oj + 1;
  }
  if (oi != os.size()) return false;
  *out = ns;
  return true;
}
}  // namespace

Tensor Tensor::view(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), shape_, "view");
  Strides st;
  ENGINE_REQUIRE(view_strides(shape_, strides_, s, &st), "[view] cannot view shape ", shape_str(shape_),
                 " with strides ", shape_str(strides_), " as ", shape_str(s),
                 " without copying; call reshape() or contiguous() first");
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::reshape(const Shape& shape) const {
  Shape s = infer_shape(shape, numel(), shape_, "reshape");
  Strides st;
  if (view_strides(shape_, strides_, s, &st)) return Tensor(storage_, s, st, offset_, dtype_);
  return contiguous().view(s);
}

Tensor Tensor::transpose(int64_t d0, int64_t d1) const {
  std::vector<int64_t> dims(dim());
  std::iota(dims.begin(), dims.end(), 0);
  std::swap(dims[wrap_dim(d0, dim(), "transpose")], dims[wrap_dim(d1, dim(), "transpose")]);
  return permute(dims);
}

Tensor Tensor::permute(const std::vector<int64_t>& dims) const {
  ENGINE_REQUIRE(int64_t(dims.size()) == dim(), "[permute] got ", dims.size(), " dims for a ", dim(),
                 "-D tensor of shape ", shape_str(shape_));
  Shape s(dim());
  Strides st(dim());
  std::vector<bool> seen(dim(), false);
  for (int64_t i = 0; i < dim(); ++i) {
    const int64_t d = wrap_dim(dims[i], dim(), "permute");
    ENGINE_REQUIRE(!seen[d], "[permute] dim ", d, " appears twice in ", shape_str(dims));
    seen[d] = true;
    s[i] = shape_[d];
    st[i] = strides_[d];
  }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::narrow(int64_t d, int64_t start, int64_t length) const {
  d = wrap_dim(d, dim(), "narrow");
  // Compared without forming start + length, which can pass int64.
  ENGINE_REQUIRE(start >= 0 && start <= shape_[d] && length >= 0 && length <= shape_[d] - start, "[narrow] start ",
                 start, " and length ", length, " do not fit in dim ", d, " of size ", shape_[d], " in shape ",
                 shape_str(shape_));
  Shape s = shape_;
  s[d] = length;
  return Tensor(storage_, s, strides_, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::slice(int64_t d, int64_t start, int64_t end, int64_t step) const {
  d = wrap_dim(d, dim(), "slice");
  ENGINE_REQUIRE(step > 0, "[slice] step must be positive, got ", step);
  const int64_t n = shape_[d];
  // Python's rules: negative positions count from the end; out-of-range ones are clamped.
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::clamp<int64_t>(start, 0, n);
  end = std::clamp<int64_t>(end, start, n);
  Shape s = shape_;
  Strides st = strides_;
  // ceil((end - start) / step) without forming end - start + step, which a huge step overflows.
  s[d] = end == start ? 0 : 1 + (end - start - 1) / step;
  if (s[d] > 1) st[d] = strides_[d] * step;  // then step < n: the product stays inside the storage
  return Tensor(storage_, s, st, offset_ + start * strides_[d], dtype_);
}

Tensor Tensor::select(int64_t d, int64_t index) const {
  d = wrap_dim(d, dim(), "select");
  ENGINE_REQUIRE(index >= -shape_[d] && index < shape_[d], "[select] index ", index, " is out of range for dim ", d,
                 " of size ", shape_[d]);
  if (index < 0) index += shape_[d];
  Shape s = shape_;
  Strides st = strides_;
  s.erase(s.begin() + d);
  st.erase(st.begin() + d);
  return Tensor(storage_, s, st, offset_ + index * strides_[d], dtype_);
}

Tensor Tensor::expand(const Shape& shape) const {
  ENGINE_REQUIRE(shape.size() >= shape_.size(), "[expand] cannot expand shape ", shape_str(shape_), " to ",
                 shape_str(shape), " (fewer dims)");
  const size_t lead = shape.size() - shape_.size();
  // -1 keeps an existing dim's size; a new leading dim has none to keep (as in PyTorch).
  for (size_t i = 0; i < shape.size(); ++i)
    ENGINE_REQUIRE(
        shape[i] >= 0 || (shape[i] == -1 && i >= lead), "[expand] cannot expand shape ", shape_str(shape_), " to ",
        shape_str(shape), ": size ", shape[i], " in dim ", i,
        i < lead ? " (a new leading dim must be given a size >= 0)" : " (only -1, keep the size, is allowed)");
  Shape s = shape;
  Strides st(shape.size(), 0);
  for (size_t i = 0; i < shape_.size(); ++i) {
    const int64_t want = shape[lead + i] == -1 ? shape_[i] : shape[lead + i];
    ENGINE_REQUIRE(shape_[i] == want || shape_[i] == 1, "[expand] cannot expand shape ", shape_str(shape_), " to ",
                   shape_str(shape), ": dim ", i, " has size ", shape_[i], ", not 1");
    s[lead + i] = want;
    st[lead + i] = shape_[i] == 1 && want != 1 ? 0 : strides_[i];
  }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::squeeze() const {
  Shape s;
  Strides st;
  for (int64_t i = 0; i < dim(); ++i)
    if (shape_[i] != 1) {
      s.push_back(shape_[i]);
      st.push_back(strides_[i]);
    }
  return Tensor(storage_, s, st, offset_, dtype_);
}

Tensor Tensor::squeeze(int64_t d) const {
  d = wrap_dim(d, dim(), "squeeze");
  if (shape_[d] != 1) return *this;
  return select(d, 0);
}

Tensor Tensor::unsqueeze(int64_t d) const {
  d = wrap_dim(d, dim() + 1, "unsqueeze");
  Shape s = shape_;
  Strides st = strides_;
  const int64_t stride = d < dim() ? strides_[d] * shape_[d] : 1;
  s.insert(s.begin() + d, 1);
  st.insert(st.begin() + d, stride);
  return Tensor(storage_, s, st, offset_, dtype_);
}

// ---------------------------------------------------------------------------------------
// Copies

Tensor Tensor::contiguous() const {
  ENGINE_REQUIRE(defined(), "[contiguous] tensor is undefined");
  if (is_contiguous()) return *this;
  return clone();
}

Tensor Tensor::clone() const {
  ENGINE_REQUIRE(defined(), "[clone] tensor is undefined");
  Tensor out = empty(shape_, dtype_, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(DType dtype) const {
  if (dtype == dtype_) return *this;
  Tensor out = empty(shape_, dtype, device());
  out.copy_(*this);
  return out;
}

Tensor Tensor::to(Device device) const {
  ENGINE_REQUIRE(defined(), "[to] tensor is undefined");
  if (device == this->device()) return *this;
  // Dense bytes cross between host and GPU; a strided view is made contiguous first, on
  // the side it lives on.
  const Tensor src = contiguous();
  Tensor out = empty(shape_, dtype_, device);
  if (device.is_cuda() && src.device().is_cpu()) {
    cuda::copy_host_to_device(out.bytes(), src.bytes(), nbytes(), device.index);
  } else if (device.is_cpu()) {
    cuda::copy_device_to_host(out.bytes(), src.bytes(), nbytes(), src.device().index);
  } else {  // GPU to GPU, through the host: simple, and rare in a one-process-per-GPU engine
    return to(Device::cpu()).to(device);
  }
  return out;
}

namespace {
// Dense float32 <-> bfloat16/float16 conversions through the vectorised loops; false for
// any other pair (the generic loop below handles those).
bool convert_dense(const Tensor& src, const Tensor& dst) {
  const int64_t n = src.numel();
  if (src.dtype() == DType::Float32 && dst.dtype() == DType::BFloat16)
    detail::float_to_bf16(src.data<float>(), dst.data<bfloat16>(), n);
  else if (src.dtype() == DType::BFloat16 && dst.dtype() == DType::Float32)
    detail::bf16_to_float(src.data<bfloat16>(), dst.data<float>(), n);
  else if (src.dtype() == DType::Float32 && dst.dtype() == DType::Float16)
    detail::float_to_fp16(src.data<float>(), dst.data<float16>(), n);
  else if (src.dtype() == DType::Float16 && dst.dtype() == DType::Float32)
    detail::fp16_to_float(src.data<float16>(), dst.data<float>(), n);
  else
    return false;
  return true;
}
}  // namespace

Tensor& Tensor::copy_(const Tensor& src) {
  ENGINE_REQUIRE(defined() && src.defined(), "[copy_] tensor is undefined");
  Shape bs = broadcast_shapes(src.shape(), shape_, "copy_");
  ENGINE_REQUIRE(bs == shape_, "[copy_] source of shape ", shape_str(src.shape()),
                 " does not broadcast to destination shape ", shape_str(shape_));
  require_distinct_elements(*this, "copy_");
  // A source that overlaps what this copy writes is read whole first (a[1:] = a[:-1]; a
  // cudaMemcpy between overlapping ranges is undefined too). The very same view is a no-op.
  if (share_memory(*this, src) && !same_view(*this, src)) return copy_(src.clone());
  storage_->bump_version();
  if (device().is_cuda() || src.device().is_cuda()) {
    cuda_ops::copy_(*this, src);
    return *this;
  }
  if (src.dtype() == dtype_ && src.shape() == shape_ && src.is_contiguous() && is_contiguous()) {
    std::memmove(this->bytes(), src.bytes(), nbytes());
    return *this;
  }
  if (src.shape() == shape_ && src.is_contiguous() && is_contiguous() && convert_dense(src, *this)) return *this;
  const Strides ss = detail::broadcast_strides(src.shape(), src.strides(), shape_);
  // Any dtype to any other; a conversion to bfloat16/float16 rounds to nearest even.
  dispatch_storage(dtype_, [&](auto dz) {
    using D = decltype(dz);
    dispatch_storage(src.dtype(), [&](auto sz) {
      using S = decltype(sz);
      D* d = static_cast<D*>(storage_->data());
      const S* s = static_cast<const S*>(src.storage()->data());
      detail::for_each_offset<2>(shape_, {strides_, ss}, {offset_, src.offset()},
                                 [&](const std::array<int64_t, 2>& o) { d[o[0]] = D(s[o[1]]); });
    });
  });
  return *this;
}

Tensor& Tensor::fill_(double value) {
  ENGINE_REQUIRE(defined(), "[fill_] tensor is undefined");
  storage_->bump_version();
  // double -> int64 of a NaN or of a value past +-2^63 is undefined (x86 gives INT64_MIN);
  // PyTorch refuses it too. Fractions truncate, as in PyTorch.
  ENGINE_REQUIRE(dtype_ != DType::Int64 || (value >= -0x1p63 && value < 0x1p63), "[fill_] ", value,
                 " cannot be converted to int64 without overflow");
  if (device().is_cuda()) {
    cuda_ops::fill_(*this, value);
    return *this;
  }
  dispatch_storage(dtype_, [&](auto zero) {
    using T = decltype(zero);
    T* d = static_cast<T*>(storage_->data());
    const T v = T(value);
    if (is_contiguous()) {  // one run: std::fill, which for 0 is a memset
      std::fill(d + offset_, d + offset_ + numel(), v);
      return;
    }
    detail::for_each_offset<1>(shape_, {strides_}, {offset_}, [&](const std::array<int64_t, 1>& o) { d[o[0]] = v; });
  });
  return *this;
}

}  // namespace engine
