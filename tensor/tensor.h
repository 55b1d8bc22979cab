// Tensor: an n-dimensional array with a shape, strides, an offset, a dtype and a device,
// viewing a shared Storage. Views (reshape, transpose, slice, expand, ...) share memory;
// contiguous() and clone() copy.
//
//   Tensor a = arange(0, 6).reshape({2, 3});   // [[0,1,2],[3,4,5]]
//   Tensor t = a.transpose(0, 1);              // (3,2) view, no copy; t.is_contiguous() == false
//   Tensor r = a.select(0, 1);                 // [3,4,5], a view of row 1
//   r.fill_(7);                                // writes through: a is now [[0,1,2],[7,7,7]]
//   std::cout << a;                            // prints values, shape, dtype, device
//
// Creation functions (zeros, randn, from_vector, ...) are below the class; math is in ops.h.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <iosfwd>
#include <memory>
#include <vector>

#include "tensor/check.h"
#include "tensor/device.h"
#include "tensor/dtype.h"
#include "tensor/random.h"
#include "tensor/shape.h"
#include "tensor/storage.h"

namespace engine {

class Tensor {
 public:
  Tensor() = default;  // an undefined tensor: defined() is false
  Tensor(std::shared_ptr<Storage> storage, Shape shape, Strides strides, int64_t offset, DType dtype);

  // ---- what it is
  bool defined() const { return storage_ != nullptr; }
  const Shape& shape() const { return shape_; }
  const Strides& strides() const { return strides_; }
  int64_t offset() const { return offset_; }  // in elements, into the storage
  DType dtype() const { return dtype_; }
  Device device() const;
  int64_t dim() const { return int64_t(shape_.size()); }
  int64_t size(int64_t d) const;  // negative d counts from the end
  int64_t numel() const { return engine::numel(shape_); }
  bool is_contiguous() const;
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  // ---- element access (CPU)
  // Pointer to the first element; T must match dtype(). Elements are at offsets given by strides().
  template <class T>
  T* data() const;
  // The address of the first element and the bytes of all elements, whatever the dtype
  // (for code that moves raw bytes: copies, sockets, files). Contiguous tensors only
  // make sense here: the bytes are numel() * element size from bytes().
  char* bytes() const;
  size_t nbytes() const { return size_t(numel()) * dtype_size(dtype_); }
  // The single value of a one-element tensor, as a double.
  double item() const;
  // The value at a full index, e.g. t.at({1, 2}).
  double at(std::initializer_list<int64_t> index) const;
  // All values in row-major order, copied out.
  template <class T>
  std::vector<T> to_vector() const;

  // ---- views: share storage, no copy
  Tensor view(const Shape& shape) const;     // needs compatible strides; -1 infers one dim
  Tensor reshape(const Shape& shape) const;  // a view when possible, else a copy
  Tensor transpose(int64_t d0, int64_t d1) const;
  Tensor permute(const std::vector<int64_t>& dims) const;
  Tensor narrow(int64_t dim, int64_t start, int64_t length) const;
  Tensor slice(int64_t dim, int64_t start, int64_t end, int64_t step = 1) const;
  Tensor select(int64_t dim, int64_t index) const;  // removes `dim`
  Tensor expand(const Shape& shape) const;          // size-1 dims repeat with stride 0
  Tensor broadcast_to(const Shape& shape) const { return expand(shape); }
  Tensor squeeze() const;               // drops every size-1 dim
  Tensor squeeze(int64_t dim) const;    // drops `dim` if it has size 1
  Tensor unsqueeze(int64_t dim) const;  // inserts a size-1 dim
  Tensor flatten() const { return reshape({numel()}); }

  // ---- copies
  Tensor contiguous() const;  // itself if already contiguous, else a row-major copy
  Tensor clone() const;       // always a fresh row-major copy
  Tensor to(Device device) const;
  Tensor to(DType dtype) const;

  // ---- in place (write through to the storage, views included)
  Tensor& copy_(const Tensor& src);  // src broadcasts to this shape; dtypes may differ
  Tensor& fill_(double value);
  Tensor& zero_() { return fill_(0); }

 private:
  std::shared_ptr<Storage> storage_;
  Shape shape_;
  Strides strides_;
  int64_t offset_ = 0;
  DType dtype_ = DType::Float32;
};

std::ostream& operator<<(std::ostream& out, const Tensor& t);

// Throws, naming `op`, when several of t's elements are one element in memory (an expand()ed
// view): an in-place write there would keep one value of several. fill_ needs no such check.
void require_distinct_elements(const Tensor& t, const char* op);

// Whether two tensors share any byte of memory (one a view of the other, or overlapping
// views of one storage; conservative for interleaved views). An op that writes one while
// it reads the other reads a source that shares memory whole first (copy_, add_, matmul's
// `out`, the collectives), unless both are the very same view (a += a reads each element
// before writing it).
bool share_memory(const Tensor& a, const Tensor& b);
bool same_view(const Tensor& a, const Tensor& b);  // same storage, offset, shape, strides and dtype

// ---- creation. `device` defaults to the CPU; random ones draw from `gen` or the default.
Tensor empty(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor zeros(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor ones(const Shape& shape, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor full(const Shape& shape, double value, DType dtype = DType::Float32, Device device = Device::cpu());
Tensor zeros_like(const Tensor& t);
Tensor ones_like(const Tensor& t);
// start, start+step, ... < end (like Python's range); float32 unless dtype says otherwise.
Tensor arange(double start, double end, double step = 1, DType dtype = DType::Float32);
// On a GPU, rand and randn draw there (a seed from `gen`, then a kernel): no host copy.
Tensor rand(const Shape& shape, Generator* gen = nullptr, Device device = Device::cpu());   // uniform in [0, 1)
Tensor randn(const Shape& shape, Generator* gen = nullptr, Device device = Device::cpu());  // standard normal
Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen = nullptr);    // int64
// Values in row-major order; the shape defaults to 1-D. Throws if the sizes disagree.
Tensor from_vector(const std::vector<float>& values, Shape shape = {});
Tensor from_vector(const std::vector<int64_t>& values, Shape shape = {});
Tensor tensor(std::initializer_list<float> values);
Tensor scalar_tensor(double value, DType dtype = DType::Float32);

// ---- template definitions
template <class T>
T* Tensor::data() const {
  ENGINE_REQUIRE(defined(), "[data] tensor is undefined");
  ENGINE_REQUIRE(dtype_of<T>() == dtype_, "[data] tensor holds ", dtype_name(dtype_), ", asked for ",
                 dtype_name(dtype_of<T>()));
  return static_cast<T*>(storage_->data()) + offset_;
}

}  // namespace engine
