// Reduction kernels of tensor/cuda/kernels.h over a dense (outer, reduced, inner) block.
// Kernels first, launchers after.
//
// inner == 1 (reducing the last dims, the common case): one block of threads per output
// row; each thread folds a strided slice of the row, then the block combines its threads'
// partial results, first within each warp by shuffles, then across warps through shared
// memory. A few very long rows (a sum over everything) would leave most of the GPU idle, so
// those rows are cut into chunks reduced by separate blocks, and a second launch of the
// same kernel combines the chunks' partial results.
// inner > 1 (reducing leading dims, e.g. a bias gradient): a warp per 32 neighbouring
// outputs and run of rows, walking down the columns; the runs are then combined in order.
#include <cuda_runtime.h>

#include <cfloat>
#include <climits>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// The reductions: an accumulator type A, its identity, how to fold an element in and how
// to combine two accumulators. Float sums accumulate in double, as the CPU does.

template <class T>
struct SumR {
  using A = std::conditional_t<std::is_same_v<T, float>, double, int64_t>;
  __device__ static A identity() { return A(0); }
  __device__ static A element(T x, int64_t) { return A(x); }
  __device__ static A combine(A a, A b) { return a + b; }
  __device__ static T result(A a, double scale) { return T(double(a) * scale); }
};

template <class T>
__device__ __forceinline__ bool is_nan(T x) {
  return x != x;  // false for integers
}

template <class T, bool kMax>
struct ExtremeR {
  using A = T;
  __device__ static A identity() {
    if constexpr (std::is_same_v<T, float>)
      return kMax ? -INFINITY : INFINITY;
    else
      return kMax ? LLONG_MIN : LLONG_MAX;
  }
  __device__ static A element(T x, int64_t) { return x; }
  __device__ static A combine(A a, A b) {
    if (is_nan(a)) return a;  // NaN propagates, as in PyTorch
    if (is_nan(b)) return b;
    return kMax ? (b > a ? b : a) : (b < a ? b : a);
  }
  __device__ static T result(A a, double) { return a; }
};

// (value, index): the larger value wins, a NaN beats any number, ties go to the lower index.
template <class T>
struct ArgMaxR {
  struct A {
    T value;
    int64_t index;
  };
  __device__ static A identity() { return {ExtremeR<T, true>::identity(), LLONG_MAX}; }
  __device__ static A element(T x, int64_t i) { return {x, i}; }
  __device__ static A combine(A a, A b) {
    const bool an = is_nan(a.value) && a.index != LLONG_MAX, bn = is_nan(b.value) && b.index != LLONG_MAX;
    if (an || bn) return (an && (!bn || a.index < b.index)) ? a : b;
    if (a.value != b.value) return a.value > b.value ? a : b;
    return a.index < b.index ? a : b;
  }
  __device__ static int64_t result(A a, double) { return a.index; }
};

// Warp shuffles move 32- or 64-bit words; an accumulator of any size moves word by word.
template <class A>
__device__ __forceinline__ A shuffle_down(A a, int delta) {
  static_assert(sizeof(A) % 4 == 0, "accumulators are whole 32-bit words");
  A out;
  const int* src = reinterpret_cast<const int*>(&a);
  int* dst = reinterpret_cast<int*>(&out);
#pragma unroll
  for (int w = 0; w < int(sizeof(A) / 4); ++w) dst[w] = __shfl_down_sync(0xffffffffu, src[w], delta);
  return out;
}

// Combines one accumulator per thread into thread 0's.
template <class R, class A>
__device__ A block_combine(A acc) {
  __shared__ unsigned char raw[32 * sizeof(A)];
  A* per_warp = reinterpret_cast<A*>(raw);
  for (int d = 16; d > 0; d /= 2) acc = R::combine(acc, shuffle_down(acc, d));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, warps = blockDim.x / 32;
  if (lane == 0) per_warp[warp] = acc;
  __syncthreads();
  if (warp == 0) {
    acc = lane < warps ? per_warp[lane] : R::identity();
    for (int d = 16; d > 0; d /= 2) acc = R::combine(acc, shuffle_down(acc, d));
  }
  return acc;
}

// Block b reduces chunk (b % chunks) of row (b / chunks): elements [c * len, min(n, (c+1) * len)).
// kFinal: write R::result into `out` (type Out); else the raw accumulator into `out` (type A).
template <class R, class In, bool kFromAcc, bool kFinal, class Out>
__global__ void reduce_rows_kernel(const In* in, Out* out, int64_t n, int64_t chunks, int64_t len, double scale) {
  const int64_t row = blockIdx.x / chunks, chunk = blockIdx.x % chunks;
  const int64_t begin = chunk * len, end = min(n, begin + len);
  const In* x = in + row * n;
  auto fold = [&](typename R::A acc, int64_t i) {
    if constexpr (kFromAcc)
      return R::combine(acc, x[i]);
    else
      return R::combine(acc, R::element(x[i], i));
  };
  // Four loads per thread per iteration, issued before any is used: a memory-bound loop
  // needs many bytes in flight, and one dependent load at a time leaves the bus idle.
  typename R::A acc = R::identity();
  const int64_t step = blockDim.x;
  if constexpr (!kFromAcc && std::is_same_v<In, float>) {
    // Float input: 16-byte loads (four floats each), two per iteration, over the aligned
    // middle of the range; the at most 3 elements before it and the tail go one by one.
    int64_t head = begin;
    while (head < end && (reinterpret_cast<uintptr_t>(x + head) & 15) != 0) ++head;
    const int64_t n4 = (end - head) / 4;
    const float4* v = reinterpret_cast<const float4*>(x + head);
    auto fold4 = [&](typename R::A a, float4 f, int64_t i) {
      return R::combine(a, R::combine(R::combine(R::element(f.x, i), R::element(f.y, i + 1)),
                                      R::combine(R::element(f.z, i + 2), R::element(f.w, i + 3))));
    };
    int64_t k = threadIdx.x;
    for (; k + step < n4; k += 2 * step) {
      const float4 f0 = v[k], f1 = v[k + step];
      acc = fold4(fold4(acc, f0, head + 4 * k), f1, head + 4 * (k + step));
    }
    for (; k < n4; k += step) acc = fold4(acc, v[k], head + 4 * k);
    for (int64_t i = begin + threadIdx.x; i < head; i += step) acc = fold(acc, i);
    for (int64_t i = head + 4 * n4 + threadIdx.x; i < end; i += step) acc = fold(acc, i);
  } else {
    int64_t i = begin + threadIdx.x;
    for (; i + 3 * step < end; i += 4 * step) {
      const In v0 = x[i], v1 = x[i + step], v2 = x[i + 2 * step], v3 = x[i + 3 * step];
      if constexpr (kFromAcc) {
        acc = R::combine(R::combine(acc, v0), R::combine(v1, R::combine(v2, v3)));
      } else {
        acc = R::combine(acc, R::combine(R::combine(R::element(v0, i), R::element(v1, i + step)),
                                         R::combine(R::element(v2, i + 2 * step), R::element(v3, i + 3 * step))));
      }
    }
    for (; i < end; i += step) acc = fold(acc, i);
  }
  acc = block_combine<R>(acc);
  if (threadIdx.x == 0) {
    if constexpr (kFinal)
      out[blockIdx.x] = R::result(acc, scale);
    else
      out[blockIdx.x] = acc;
  }
}

// A block takes 32 neighbouring outputs (threadIdx.x: neighbouring addresses) and splits
// their rows into kGroups consecutive runs, one warp each (threadIdx.y); the runs' results
// are combined in row order, so ArgMax still keeps the first maximum and the order of a
// sum is fixed. One thread walking a whole column left a bias gradient (10 outputs, 256
// rows) to 10 threads, each waiting on 256 loads in turn.
constexpr int kGroups = 8;
template <class R, class T, class Out>
__global__ void reduce_columns_kernel(const T* in, Out* out, int64_t outer, int64_t reduced, int64_t inner,
                                      double scale) {
  using A = typename R::A;
  __shared__ alignas(A) unsigned char raw[kGroups * 32 * sizeof(A)];
  A* part = reinterpret_cast<A*>(raw);  // part[group * 32 + lane]
  const int64_t len = (reduced + kGroups - 1) / kGroups, r0 = threadIdx.y * len, r1 = min(reduced, r0 + len);
  for (int64_t base = blockIdx.x * int64_t(32); base < outer * inner; base += int64_t(32) * gridDim.x) {
    const int64_t k = base + threadIdx.x;
    A acc = R::identity();
    if (k < outer * inner) {
      const T* x = in + (k / inner) * reduced * inner + k % inner;
      for (int64_t r = r0; r < r1; ++r) acc = R::combine(acc, R::element(x[r * inner], r));
    }
    part[threadIdx.y * 32 + threadIdx.x] = acc;
    __syncthreads();
    if (threadIdx.y == 0 && k < outer * inner) {
      for (int g = 1; g < kGroups; ++g) acc = R::combine(acc, part[g * 32 + threadIdx.x]);
      out[k] = R::result(acc, scale);
    }
    __syncthreads();  // part is written again by the next 32 outputs
  }
}

// ---------------------------------------------------------------------------------------
// Launchers

namespace {
constexpr int kThreads = 256;

template <class R, class T, class Out>
void run(int device, int64_t outer, int64_t reduced, int64_t inner, const T* in, Out* out, double scale,
         bool may_split) {
  cudaStream_t s = stream_of(device);
  if (inner > 1) {
    reduce_columns_kernel<R, T, Out>
        <<<blocks_for(outer * inner, 32, device), dim3(32, kGroups), 0, s>>>(in, out, outer, reduced, inner, scale);
    check_launch("reduce_columns_kernel");
    return;
  }
  // Few long rows: split each into chunks so that every multiprocessor gets blocks.
  const int64_t sms = multiprocessor_count(device);
  int64_t chunks = 1;
  if (may_split && outer < 2 * sms && reduced > 16384)
    chunks = std::min<int64_t>((reduced + 8191) / 8192, (8 * sms + outer - 1) / outer);  // 8 blocks per SM
  if (chunks == 1) {
    reduce_rows_kernel<R, T, false, true, Out>
        <<<unsigned(outer), kThreads, 0, s>>>(in, out, reduced, 1, reduced, scale);
    check_launch("reduce_rows_kernel");
    return;
  }
  using A = typename R::A;
  const int64_t len = (reduced + chunks - 1) / chunks;
  A* partial = static_cast<A*>(device_malloc(size_t(outer * chunks) * sizeof(A), device));
  reduce_rows_kernel<R, T, false, false, A>
      <<<unsigned(outer * chunks), kThreads, 0, s>>>(in, partial, reduced, chunks, len, scale);
  check_launch("reduce_rows_kernel (chunks)");
  reduce_rows_kernel<R, A, true, true, Out>
      <<<unsigned(outer), kThreads, 0, s>>>(partial, out, chunks, 1, chunks, scale);
  check_launch("reduce_rows_kernel (combine)");
  device_free(partial, device);  // reused only by work queued after this on the same stream
}
}  // namespace

void reduce(ReduceOp op, int device, DType dtype, int64_t outer, int64_t reduced, int64_t inner, const void* in,
            void* out, double scale) {
  if (outer == 0 || inner == 0) return;
  dispatch(dtype, [&](auto zero) {
    using T = decltype(zero);
    const T* x = static_cast<const T*>(in);
    switch (op) {
      case ReduceOp::Sum: return run<SumR<T>>(device, outer, reduced, inner, x, static_cast<T*>(out), scale, true);
      case ReduceOp::Max:
        return run<ExtremeR<T, true>>(device, outer, reduced, inner, x, static_cast<T*>(out), scale, true);
      case ReduceOp::Min:
        return run<ExtremeR<T, false>>(device, outer, reduced, inner, x, static_cast<T*>(out), scale, true);
      case ReduceOp::ArgMax:
        return run<ArgMaxR<T>>(device, outer, reduced, inner, x, static_cast<int64_t*>(out), scale, false);
    }
  });
}

}  // namespace engine::cuda
