// The CUDA side of ops.h (see cuda_ops.h): shapes, strides and devices are worked out
// here on the host; tensor/cuda/*.cu do the arithmetic.
#include "tensor/cuda_ops.h"

#include <limits>

#include "tensor/loops.h"
#include "tensor/matmul_plan.h"
#include "tensor/ops.h"

namespace engine::cuda_ops {
namespace {

// A CPU tensor with no dims next to GPU tensors travels as a kernel argument.
bool is_host_scalar(const Tensor& t) { return t.device().is_cpu() && t.dim() == 0; }

// The GPU all of `ts` live on; host scalars may join. Throws naming the op and devices.
Device common_device(const char* op, std::initializer_list<const Tensor*> ts) {
  Device gpu = Device::cpu();
  for (const Tensor* t : ts) {
    ENGINE_REQUIRE(t->defined(), "[", op, "] got an undefined tensor");
    if (t->device().is_cuda()) gpu = t->device();
  }
  for (const Tensor* t : ts)
    ENGINE_REQUIRE(t->device() == gpu || is_host_scalar(*t), "[", op, "] expects tensors on one device, got ",
                   shape_str(t->shape()), " on ", t->device().str(), " with another on ", gpu.str(),
                   "; move it with .to(",
                   gpu.is_cpu() ? "Device::cpu()" : "Device::cuda(" + std::to_string(gpu.index) + ")", ")");
  return gpu;
}

cuda::Operand operand(const Tensor& t) {
  if (is_host_scalar(t)) return {nullptr, t.item()};
  return {t.storage()->data(), 0};
}

// The loop over `shape` for operands with the given (already broadcast) strides.
template <int N>
cuda::Loop<N> make_loop(const char* op, Shape shape, std::array<Strides, N> strides,
                        const std::array<int64_t, N>& offs) {
  detail::coalesce<N>(shape, strides);
  ENGINE_REQUIRE(shape.size() <= size_t(cuda::kMaxDims), "[", op, "] on the GPU handles at most ", cuda::kMaxDims,
                 " dims that cannot be merged, got ", shape.size());
  cuda::Loop<N> loop;
  loop.ndim = int(shape.size());
  bool dense = true;
  for (int d = 0; d < loop.ndim; ++d) {
    loop.size[d] = shape[d];
    for (int k = 0; k < N; ++k) loop.stride[k][d] = strides[k][d];
  }
  for (int k = 0; k < N; ++k) {
    loop.offset[k] = offs[k];
    if (loop.ndim == 1) dense = dense && strides[k][0] == 1;
  }
  loop.dense = loop.ndim == 0 || (loop.ndim == 1 && dense);
  return loop;
}

// Strides of `t` read as if broadcast to `shape`; a host scalar gets zeros (never read).
Strides strides_for(const Tensor& t, const Shape& shape) {
  if (is_host_scalar(t)) return Strides(shape.size(), 0);
  return detail::broadcast_strides(t.shape(), t.strides(), shape);
}
int64_t offset_for(const Tensor& t) { return is_host_scalar(t) ? 0 : t.offset(); }

}  // namespace

bool on_cuda(const Tensor& a) { return a.defined() && a.device().is_cuda(); }
bool on_cuda(const Tensor& a, const Tensor& b) { return on_cuda(a) || on_cuda(b); }

Tensor binary(const char* op, cuda::BinaryOp kind, const Tensor& a, const Tensor& b) {
  const Device dev = common_device(op, {&a, &b});
  const Shape shape = broadcast_shapes(a.shape(), b.shape(), op);
  Tensor out = empty(shape, cuda::is_comparison(kind) ? DType::Float32 : a.dtype(), dev);
  const auto loop = make_loop<3>(op, shape, {out.strides(), strides_for(a, shape), strides_for(b, shape)},
                                 {0, offset_for(a), offset_for(b)});
  cuda::binary(kind, dev.index, out.numel(), loop, a.dtype(), out.storage()->data(), operand(a), operand(b));
  return out;
}

Tensor unary(const char* op, cuda::UnaryOp kind, const Tensor& a, double p0, double p1) {
  Tensor out = empty(a.shape(), a.dtype(), a.device());
  const auto loop = make_loop<2>(op, a.shape(), {out.strides(), a.strides()}, {0, a.offset()});
  cuda::unary(kind, a.device().index, a.numel(), loop, a.dtype(), out.storage()->data(), a.storage()->data(), p0, p1);
  return out;
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  const Device dev = common_device("where", {&cond, &a, &b});
  ENGINE_REQUIRE(!is_host_scalar(cond) || cond.device() == dev, "[where] the condition must be on ", dev.str());
  const Shape shape = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = empty(shape, a.dtype(), dev);
  const auto loop = make_loop<4>("where", shape,
                                 {out.strides(), detail::broadcast_strides(cond.shape(), cond.strides(), shape),
                                  strides_for(a, shape), strides_for(b, shape)},
                                 {0, cond.offset(), offset_for(a), offset_for(b)});
  cuda::where(dev.index, out.numel(), loop, cond.dtype(), cond.storage()->data(), a.dtype(), out.storage()->data(),
              operand(a), operand(b));
  return out;
}

void add_(Tensor& a, const Tensor& b, double alpha) {
  const Device dev = common_device("add_", {&a, &b});
  ENGINE_REQUIRE(a.device() == dev, "[add_] cannot add a GPU tensor into a CPU one in place");
  const auto loop = make_loop<3>("add_", a.shape(), {a.strides(), a.strides(), strides_for(b, a.shape())},
                                 {a.offset(), a.offset(), offset_for(b)});
  cuda::binary(cuda::BinaryOp::AddScaled, dev.index, a.numel(), loop, a.dtype(), a.storage()->data(),
               {a.storage()->data(), 0}, operand(b), alpha);
}

void mul_(Tensor& a, double s) {
  const auto loop = make_loop<2>("mul_", a.shape(), {a.strides(), a.strides()}, {a.offset(), a.offset()});
  cuda::unary(cuda::UnaryOp::Scale, a.device().index, a.numel(), loop, a.dtype(), a.storage()->data(),
              a.storage()->data(), s);
}

void copy_(Tensor& dst, const Tensor& src) {
  Tensor s = src;
  if (dst.device() != src.device()) {
    // One hop between host and GPU, as dense bytes in the source's dtype and shape; the
    // strided scatter into dst (and any dtype change) then happens on dst's device.
    s = src.to(dst.device());
    if (dst.device().is_cpu()) return void(dst.copy_(s));
  }
  const auto loop = make_loop<2>("copy_", dst.shape(),
                                 {dst.strides(), detail::broadcast_strides(s.shape(), s.strides(), dst.shape())},
                                 {dst.offset(), s.offset()});
  if (dst.dtype() == s.dtype() && loop.dense) {
    cuda::copy_device_to_device(dst.bytes(), s.bytes(), dst.nbytes(), dst.device().index);
    return;
  }
  cuda::convert(dst.device().index, dst.numel(), loop, dst.dtype(), dst.storage()->data(), s.dtype(),
                s.storage()->data());
}

void fill_(Tensor& t, double value) {
  const auto loop = make_loop<1>("fill_", t.shape(), {t.strides()}, {t.offset()});
  cuda::fill(t.device().index, t.numel(), loop, t.dtype(), t.storage()->data(), value);
}

Tensor reduce(cuda::ReduceOp op, const Tensor& a, const std::vector<bool>& reduced, bool keepdim, bool mean) {
  // Lay the input out as (outer, r, inner) with the reduced dims in the middle block: free
  // when they already are one run of dims of a contiguous tensor, else one permuted copy.
  Tensor x = a.contiguous();
  int64_t lo = -1, hi = -1;
  for (int64_t d = 0; d < x.dim(); ++d)
    if (reduced[d]) lo = lo < 0 ? d : lo, hi = d + 1;
  bool one_run = true;
  for (int64_t d = std::max<int64_t>(lo, 0); d < hi; ++d) one_run = one_run && reduced[d];
  if (!one_run) {
    std::vector<int64_t> order;
    for (int64_t d = 0; d < x.dim(); ++d)
      if (!reduced[d]) order.push_back(d);
    for (int64_t d = 0; d < x.dim(); ++d)
      if (reduced[d]) order.push_back(d);
    x = x.permute(order).contiguous();
    int64_t kept = 0;
    for (bool r : reduced) kept += r ? 0 : 1;
    lo = kept, hi = x.dim();
  }
  int64_t outer = 1, r = 1, inner = 1;
  Shape out_shape;
  for (int64_t d = 0; d < a.dim(); ++d) {
    if (!reduced[d])
      out_shape.push_back(a.size(d));
    else if (keepdim)
      out_shape.push_back(1);
  }
  if (lo < 0) lo = hi = x.dim();  // nothing reduced
  for (int64_t d = 0; d < x.dim(); ++d) (d < lo ? outer : d < hi ? r : inner) *= x.size(d);
  Tensor out = empty(out_shape, op == cuda::ReduceOp::ArgMax ? DType::Int64 : a.dtype(), a.device());
  const double scale = !mean ? 1.0 : r == 0 ? std::numeric_limits<double>::quiet_NaN() : 1.0 / double(r);
  if (r == 0 && op == cuda::ReduceOp::Sum) {  // an empty sum is 0, an empty mean NaN
    out.fill_(mean ? scale : 0.0);
    return out;
  }
  cuda::reduce(op, a.device().index, a.dtype(), outer, r, inner, x.bytes(), out.storage()->data(), scale);
  return out;
}

Tensor matmul(const Tensor& a0, const Tensor& b0, DType out_dtype) {
  const Device dev = common_device("matmul", {&a0, &b0});
  ENGINE_REQUIRE(a0.device() == b0.device(), "[matmul] expects both operands on ", dev.str());
  ENGINE_REQUIRE(a0.dtype() == b0.dtype() && (out_dtype == a0.dtype() || out_dtype == DType::Float32),
                 "[matmul] on the GPU: ", dtype_name(a0.dtype()), " @ ", dtype_name(b0.dtype()), " into ",
                 dtype_name(out_dtype), " is not a product cuBLAS is asked for here");
  const detail::MatmulPlan plan = detail::plan_matmul(a0, b0);
  const int64_t M = plan.M, K = plan.K, N = plan.N;
  const Shape &batch = plan.batch, &a_shape = plan.a_shape, &b_shape = plan.b_shape;
  Tensor a = a0.expand(a_shape), b = b0.expand(b_shape);
  const size_t nb = batch.size();
  cuda::GemmOperand la, lb;
  // cuBLAS needs a unit stride in each matrix; a view without one is copied densely.
  if (!cuda::gemm_layout(M, K, a.strides()[nb], a.strides()[nb + 1], &la)) {
    a = a0.contiguous().expand(a_shape);
    cuda::gemm_layout(M, K, a.strides()[nb], a.strides()[nb + 1], &la);
  }
  if (!cuda::gemm_layout(K, N, b.strides()[nb], b.strides()[nb + 1], &lb)) {
    b = b0.contiguous().expand(b_shape);
    cuda::gemm_layout(K, N, b.strides()[nb], b.strides()[nb + 1], &lb);
  }
  Tensor out = empty(plan.out_shape, out_dtype, dev);
  // Batch dims merge into one when their strides allow (contiguous or broadcast); what is
  // left over is looped here, one strided-batched call per index of the leading dims.
  Shape bshape = batch;
  std::array<Strides, 3> bst{Strides(out.strides().begin(), out.strides().begin() + nb),
                             Strides(a.strides().begin(), a.strides().begin() + nb),
                             Strides(b.strides().begin(), b.strides().begin() + nb)};
  detail::coalesce<3>(bshape, bst);
  const int64_t inner = bshape.empty() ? 1 : bshape.back();
  const int64_t sc = bshape.empty() ? 0 : bst[0].back(), sa = bshape.empty() ? 0 : bst[1].back(),
                sb = bshape.empty() ? 0 : bst[2].back();
  ENGINE_REQUIRE(inner == 1 || sc == M * N, "[matmul] internal: output batch stride");
  Shape outer_shape = bshape;
  std::array<Strides, 3> outer_st = bst;
  if (!outer_shape.empty()) {
    outer_shape.pop_back();
    for (auto& s : outer_st) s.pop_back();
  }
  // Offsets are in elements; the pointers step in bytes, so any element size works.
  const size_t in_size = dtype_size(a.dtype()), out_size = dtype_size(out_dtype);
  const char* pa = static_cast<const char*>(a.storage()->data());
  const char* pb = static_cast<const char*>(b.storage()->data());
  char* pc = static_cast<char*>(out.storage()->data());
  detail::for_each_offset<3>(outer_shape, outer_st, {0, a.offset(), b.offset()}, [&](const std::array<int64_t, 3>& o) {
    cuda::GemmArgs g;
    g.batch = inner, g.M = M, g.N = N, g.K = K;
    g.A = la, g.A.data = pa + size_t(o[1]) * in_size, g.A.batch_stride = sa;
    g.B = lb, g.B.data = pb + size_t(o[2]) * in_size, g.B.batch_stride = sb;
    g.C = pc + size_t(o[0]) * out_size;
    g.dtype = a.dtype(), g.out_dtype = out_dtype;
    cuda::gemm(dev.index, g);
  });
  return out;
}

}  // namespace engine::cuda_ops
