// Creation functions declared in tensor.h.
#include <cmath>

#include "tensor/cuda/kernels.h"
#include "tensor/tensor.h"

namespace engine {

Tensor empty(const Shape& shape, DType dtype, Device device) {
  for (int64_t d : shape) ENGINE_REQUIRE(d >= 0, "[empty] negative size in shape ", shape_str(shape));
  const int64_t n = numel(shape);
  ENGINE_REQUIRE(n <= INT64_MAX / int64_t(dtype_size(dtype)), "[empty] shape ", shape_str(shape), " of ",
                 dtype_name(dtype), " needs more bytes than int64 can count");
  auto storage = std::make_shared<Storage>(size_t(n) * dtype_size(dtype), device);
  return Tensor(storage, shape, contiguous_strides(shape), 0, dtype);
}

Tensor full(const Shape& shape, double value, DType dtype, Device device) {
  Tensor t = empty(shape, dtype, device);
  t.fill_(value);
  return t;
}

Tensor zeros(const Shape& shape, DType dtype, Device device) { return full(shape, 0, dtype, device); }
Tensor ones(const Shape& shape, DType dtype, Device device) { return full(shape, 1, dtype, device); }
Tensor zeros_like(const Tensor& t) { return zeros(t.shape(), t.dtype(), t.device()); }
Tensor ones_like(const Tensor& t) { return ones(t.shape(), t.dtype(), t.device()); }

Tensor arange(double start, double end, double step, DType dtype) {
  ENGINE_REQUIRE(step != 0, "[arange] step must not be 0");
  ENGINE_REQUIRE(std::isfinite(start) && std::isfinite(end) && std::isfinite(step), "[arange] unsupported range ",
                 start, " -> ", end, " with step ", step, ": each must be finite");
  if (is_half(dtype)) return arange(start, end, step, DType::Float32).to(dtype);
  // The count as a double first: converting one past int64's range is undefined.
  const double count = std::max(0.0, std::ceil((end - start) / step));
  ENGINE_REQUIRE(count < 0x1p62, "[arange] ", start, " -> ", end, " with step ", step, " has ", count,
                 " elements, more than a tensor can hold");
  const int64_t n = int64_t(count);
  Tensor t = empty({n}, dtype);
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    T* p = t.data<T>();
    for (int64_t i = 0; i < n; ++i) p[i] = T(start + double(i) * step);
  });
  return t;
}

namespace {
// A tensor of `shape` whose elements are successive draws of `draw(generator)`, in
// row-major order, from `gen` or the default generator.
template <class T, class Draw>
Tensor draw_each(const Shape& shape, Generator* gen, Draw draw) {
  Tensor t = empty(shape, dtype_of<T>());
  T* p = t.data<T>();
  with_generator(gen, [&](Generator& g) {
    for (int64_t i = 0; i < t.numel(); ++i) p[i] = draw(g);
  });
  return t;
}

// On a GPU the numbers come from a counter-based kernel (tensor/cuda/random.cu) seeded by
// two draws of the generator: different numbers from the CPU's, equally reproducible.
template <class Fill>
Tensor draw_on_gpu(const Shape& shape, Generator* gen, Device device, Fill fill) {
  uint64_t seed = 0;
  with_generator(gen, [&seed](Generator& g) { seed = (uint64_t(g.next_u32()) << 32) | g.next_u32(); });
  Tensor t = empty(shape, DType::Float32, device);
  fill(device.index, t.numel(), t.data<float>(), seed);
  return t;
}
}  // namespace

Tensor rand(const Shape& shape, Generator* gen, Device device) {
  if (device.is_cuda()) return draw_on_gpu(shape, gen, device, cuda::fill_uniform);
  return draw_each<float>(shape, gen, [](Generator& g) { return g.uniform(); });
}

Tensor randn(const Shape& shape, Generator* gen, Device device) {
  if (device.is_cuda()) return draw_on_gpu(shape, gen, device, cuda::fill_normal);
  return draw_each<float>(shape, gen, [](Generator& g) { return g.normal(); });
}

Tensor randint(int64_t low, int64_t high, const Shape& shape, Generator* gen) {
  ENGINE_REQUIRE(high > low, "[randint] empty range [", low, ", ", high, ")");
  return draw_each<int64_t>(shape, gen, [=](Generator& g) { return g.randint(low, high); });
}

namespace {
template <class T>
Tensor from_values(const std::vector<T>& values, Shape shape) {
  if (shape.empty()) shape = {int64_t(values.size())};  // 1-D by default; scalar_tensor() makes 0-D
  ENGINE_REQUIRE(numel(shape) == int64_t(values.size()), "[from_vector] ", values.size(), " values do not fill shape ",
                 shape_str(shape), " (", numel(shape), " elements)");
  Tensor t = empty(shape, dtype_of<T>());
  std::copy(values.begin(), values.end(), t.data<T>());
  return t;
}
}  // namespace

Tensor from_vector(const std::vector<float>& values, Shape shape) { return from_values(values, shape); }
Tensor from_vector(const std::vector<int64_t>& values, Shape shape) { return from_values(values, shape); }
Tensor tensor(std::initializer_list<float> values) {
  return from_values(std::vector<float>(values), {int64_t(values.size())});
}
Tensor scalar_tensor(double value, DType dtype) { return full({}, value, dtype); }

}  // namespace engine
