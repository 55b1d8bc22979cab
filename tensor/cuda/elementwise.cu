// Elementwise kernels of tensor/cuda/kernels.h: binary ops with broadcasting, unary ops,
// conversions, fill and where, over any strides. Kernels first, launchers after.
//
// Every kernel walks a Loop (kernels.h): for a dense loop element i is at offset + i; for
// any other, the flat index is split into a multi-index, dim by dim from the last, and
// each operand's offset is the dot product with its strides (0 along broadcast dims).
// The op is a run-time switch: the same value for every thread, so it costs a few
// instructions per element and keeps the number of compiled kernels small.
#include <cuda_runtime.h>

#include <cmath>
#include <type_traits>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

template <int N>
__device__ __forceinline__ void offsets_of(const Loop<N>& loop, int64_t i, int64_t (&off)[N]) {
#pragma unroll
  for (int k = 0; k < N; ++k) off[k] = loop.offset[k];
  if (loop.dense) {
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += i;
    return;
  }
  for (int d = loop.ndim - 1; d >= 0; --d) {
    const int64_t size = loop.size[d], idx = i % size;
    i /= size;
#pragma unroll
    for (int k = 0; k < N; ++k) off[k] += idx * loop.stride[k][d];
  }
}

template <class T>
__device__ __forceinline__ T load(const T* p, T scalar, int64_t off) {
  return p ? p[off] : scalar;
}

template <class T>
__device__ __forceinline__ T binary_op(BinaryOp op, T x, T y, T alpha) {
  switch (op) {
    case BinaryOp::Add: return x + y;
    case BinaryOp::Sub: return x - y;
    case BinaryOp::Mul: return x * y;
    case BinaryOp::Div: return x / y;
    case BinaryOp::Pow: return T(pow(double(x), double(y)));
    case BinaryOp::Maximum: return (x > y || x != x) ? x : y;  // NaN wins, as on the CPU
    case BinaryOp::Minimum: return (x < y || x != x) ? x : y;
    case BinaryOp::AddScaled: return x + alpha * y;
    case BinaryOp::ReluBackward: return !(y <= T(0)) ? x : T(0);  // PyTorch's threshold_backward
    default: return T(0);
  }
}

template <class T>
__device__ __forceinline__ float compare_op(BinaryOp op, T x, T y) {
  switch (op) {
    case BinaryOp::Eq: return x == y ? 1.f : 0.f;
    case BinaryOp::Ne: return x != y ? 1.f : 0.f;
    case BinaryOp::Lt: return x < y ? 1.f : 0.f;
    case BinaryOp::Le: return x <= y ? 1.f : 0.f;
    case BinaryOp::Gt: return x > y ? 1.f : 0.f;
    default: return x >= y ? 1.f : 0.f;
  }
}

// As on the CPU (tensor/elementwise.cc): x x, sqrt and 1 / sqrt (not the approximate rsqrtf)
// for the exponents PyTorch computes that way.
__device__ __forceinline__ float powf_exact(float x, float e) {
  if (e == 2.f) return x * x;
  if (e == 0.5f) return sqrtf(x);
  if (e == -0.5f) return 1.f / sqrtf(x);
  return powf(x, e);
}

// As on the CPU: int64 negates modulo 2^64; a float's abs clears the sign bit (abs(-0) = +0).
template <class T>
__device__ __forceinline__ T negate(T x) {
  if constexpr (std::is_integral_v<T>)
    return T(0ull - static_cast<unsigned long long>(x));
  else
    return -x;
}
template <class T>
__device__ __forceinline__ T absolute(T x) {
  if constexpr (std::is_integral_v<T>)
    return x < T(0) ? negate(x) : x;
  else
    return fabsf(x);
}

template <class T>
__device__ __forceinline__ T unary_op(UnaryOp op, T x, double p0, double p1) {
  switch (op) {
    case UnaryOp::Neg: return negate(x);
    case UnaryOp::Abs: return absolute(x);
    case UnaryOp::Relu: return !(x <= T(0)) ? x : T(0);  // NaN passes, as on the CPU
    case UnaryOp::Clamp: return x < T(p0) ? T(p0) : (x > T(p1) ? T(p1) : x);
    case UnaryOp::Scale: return x * T(p0);
    case UnaryOp::Square: return x * x;
    default: break;
  }
  // Float-only ops (the host refuses them for int64).
  const float f = float(x);
  switch (op) {
    case UnaryOp::Exp: return T(expf(f));
    case UnaryOp::Log: return T(logf(f));
    case UnaryOp::Sqrt: return T(sqrtf(f));
    case UnaryOp::Tanh: return T(tanhf(f));
    case UnaryOp::PowScalar: return T(powf_exact(f, float(p0)));
    case UnaryOp::Sigmoid: {  // never overflows: e^x / (1 + e^x) for x < 0
      if (f >= 0) return T(1.f / (1.f + expf(-f)));
      const float e = expf(f);
      return T(e / (1.f + e));
    }
    default: return x;
  }
}

// The general strided binary kernel, grid-stride.
template <class T, class R>
__global__ void binary_kernel(BinaryOp op, int64_t n, Loop<3> loop, R* out, const T* a, T sa, const T* b, T sb,
                              T alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t off[3];
    offsets_of(loop, i, off);
    const T x = load(a, sa, off[1]), y = load(b, sb, off[2]);
    if (op >= BinaryOp::Eq && op <= BinaryOp::Ge)
      out[off[0]] = R(compare_op(op, x, y));  // a float mask
    else
      out[off[0]] = R(binary_op(op, x, y, alpha));
  }
}

// Dense float binary ops with both operands in memory and 16-byte aligned: four elements
// per thread through one 16-byte load of each operand and one store. Fewer, wider memory
// instructions keep more bytes in flight, which is what a memory-bound kernel needs.
__global__ void binary_dense_float4_kernel(BinaryOp op, int64_t n4, float4* out, const float4* a, const float4* b,
                                           float alpha) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(blockDim.x) * gridDim.x) {
    const float4 x = a[i], y = b[i];
    out[i] = make_float4(binary_op(op, x.x, y.x, alpha), binary_op(op, x.y, y.y, alpha), binary_op(op, x.z, y.z, alpha),
                         binary_op(op, x.w, y.w, alpha));
  }
}

template <class T>
__global__ void unary_kernel(UnaryOp op, int64_t n, Loop<2> loop, T* out, const T* in, double p0, double p1) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t off[2];
    offsets_of(loop, i, off);
    out[off[0]] = unary_op(op, in[off[1]], p0, p1);
  }
}

__global__ void unary_dense_float4_kernel(UnaryOp op, int64_t n4, float4* out, const float4* in, double p0, double p1) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n4; i += int64_t(blockDim.x) * gridDim.x) {
    const float4 x = in[i];
    out[i] = make_float4(unary_op(op, x.x, p0, p1), unary_op(op, x.y, p0, p1), unary_op(op, x.z, p0, p1),
                         unary_op(op, x.w, p0, p1));
  }
}

template <class D, class S>
__global__ void convert_kernel(int64_t n, Loop<2> loop, D* out, const S* in) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t off[2];
    offsets_of(loop, i, off);
    out[off[0]] = D(in[off[1]]);
  }
}

template <class T>
__global__ void fill_kernel(int64_t n, Loop<1> loop, T* out, T value) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t off[1];
    offsets_of(loop, i, off);
    out[off[0]] = value;
  }
}

template <class C, class T>
__global__ void where_kernel(int64_t n, Loop<4> loop, const C* cond, T* out, const T* a, T sa, const T* b, T sb) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    int64_t off[4];
    offsets_of(loop, i, off);
    out[off[0]] = cond[off[1]] != C(0) ? load(a, sa, off[2]) : load(b, sb, off[3]);
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

namespace {
constexpr int kThreads = 256;

bool aligned16(const void* p) { return reinterpret_cast<uintptr_t>(p) % 16 == 0; }

// A dense float loop whose operands all start 16-byte aligned can run four at a time.
template <int N>
bool float4_ready(const Loop<N>& loop, int64_t n, const void* const (&ptrs)[N]) {
  if (!loop.dense || n % 4 != 0) return false;
  for (int k = 0; k < N; ++k)
    if (!ptrs[k] || !aligned16(static_cast<const float*>(ptrs[k]) + loop.offset[k])) return false;
  return true;
}

template <class T, class R>
void launch_binary(BinaryOp op, int device, int64_t n, const Loop<3>& loop, void* out, Operand a, Operand b,
                   double alpha) {
  binary_kernel<T, R><<<blocks_for(n, kThreads, device), kThreads, 0, stream_of(device)>>>(
      op, n, loop, static_cast<R*>(out), static_cast<const T*>(a.ptr), T(a.scalar), static_cast<const T*>(b.ptr),
      T(b.scalar), T(alpha));
  check_launch("binary_kernel");
}
}  // namespace

void binary(BinaryOp op, int device, int64_t n, const Loop<3>& loop, DType dtype, void* out, Operand a, Operand b,
            double alpha) {
  if (n == 0) return;
  if (dtype == DType::Float32 && !is_comparison(op) && float4_ready<3>(loop, n, {out, a.ptr, b.ptr})) {
    const int64_t n4 = n / 4;
    binary_dense_float4_kernel<<<blocks_for(n4, kThreads, device), kThreads, 0, stream_of(device)>>>(
        op, n4, reinterpret_cast<float4*>(static_cast<float*>(out) + loop.offset[0]),
        reinterpret_cast<const float4*>(static_cast<const float*>(a.ptr) + loop.offset[1]),
        reinterpret_cast<const float4*>(static_cast<const float*>(b.ptr) + loop.offset[2]), float(alpha));
    check_launch("binary_dense_float4_kernel");
    return;
  }
  if (dtype == DType::Float32)
    launch_binary<float, float>(op, device, n, loop, out, a, b, alpha);
  else if (is_comparison(op))
    launch_binary<int64_t, float>(op, device, n, loop, out, a, b, alpha);
  else
    launch_binary<int64_t, int64_t>(op, device, n, loop, out, a, b, alpha);
}

void unary(UnaryOp op, int device, int64_t n, const Loop<2>& loop, DType dtype, void* out, const void* in, double p0,
           double p1) {
  if (n == 0) return;
  if (dtype == DType::Float32 && float4_ready<2>(loop, n, {out, in})) {
    const int64_t n4 = n / 4;
    unary_dense_float4_kernel<<<blocks_for(n4, kThreads, device), kThreads, 0, stream_of(device)>>>(
        op, n4, reinterpret_cast<float4*>(static_cast<float*>(out) + loop.offset[0]),
        reinterpret_cast<const float4*>(static_cast<const float*>(in) + loop.offset[1]), p0, p1);
    check_launch("unary_dense_float4_kernel");
    return;
  }
  const int blocks = blocks_for(n, kThreads, device);
  if (dtype == DType::Float32)
    unary_kernel<float><<<blocks, kThreads, 0, stream_of(device)>>>(op, n, loop, static_cast<float*>(out),
                                                                    static_cast<const float*>(in), p0, p1);
  else
    unary_kernel<int64_t><<<blocks, kThreads, 0, stream_of(device)>>>(op, n, loop, static_cast<int64_t*>(out),
                                                                      static_cast<const int64_t*>(in), p0, p1);
  check_launch("unary_kernel");
}

void convert(int device, int64_t n, const Loop<2>& loop, DType out_dtype, void* out, DType in_dtype, const void* in) {
  if (n == 0) return;
  const int blocks = blocks_for(n, kThreads, device);
  cudaStream_t s = stream_of(device);
  dispatch_storage(out_dtype, [&](auto dz) {  // 16-bit types too: a conversion is all they need
    using D = decltype(dz);
    dispatch_storage(in_dtype, [&](auto sz) {
      using S = decltype(sz);
      convert_kernel<D, S><<<blocks, kThreads, 0, s>>>(n, loop, static_cast<D*>(out), static_cast<const S*>(in));
    });
  });
  check_launch("convert_kernel");
}

void fill(int device, int64_t n, const Loop<1>& loop, DType dtype, void* out, double value) {
  if (n == 0) return;
  const int blocks = blocks_for(n, kThreads, device);
  dispatch_storage(dtype, [&](auto zero) {
    using T = decltype(zero);
    fill_kernel<T><<<blocks, kThreads, 0, stream_of(device)>>>(n, loop, static_cast<T*>(out), T(value));
  });
  check_launch("fill_kernel");
}

void where(int device, int64_t n, const Loop<4>& loop, DType cond_dtype, const void* cond, DType dtype, void* out,
           Operand a, Operand b) {
  if (n == 0) return;
  const int blocks = blocks_for(n, kThreads, device);
  dispatch(cond_dtype, [&](auto czero) {
    using C = decltype(czero);
    dispatch(dtype, [&](auto zero) {
      using T = decltype(zero);
      where_kernel<C, T><<<blocks, kThreads, 0, stream_of(device)>>>(
          n, loop, static_cast<const C*>(cond), static_cast<T*>(out), static_cast<const T*>(a.ptr), T(a.scalar),
          static_cast<const T*>(b.ptr), T(b.scalar));
    });
  });
  check_launch("where_kernel");
}

}  // namespace engine::cuda
