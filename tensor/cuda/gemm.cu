// Matrix products of tensor/cuda/kernels.h: the teaching tiled kernel first, then the
// launchers, of which gemm() goes through cuBLAS.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <mutex>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/shared_library.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

// C = A @ B with 32 x 32 tiles. Each block computes one 32 x 32 tile of C, one thread per
// element. It walks along K one tile at a time: the block loads a tile of A and a tile of
// B into shared memory (each thread loads one element of each), waits, and every thread
// accumulates its 32 products from shared memory (a warp reads one a_tile element, a
// broadcast, and 32 neighbouring b_tile elements, 32 different banks: no conflicts). Each input element is read from
// global memory K/32 times fewer than in the naive kernel. Out-of-range loads become zeros so any M, N, K work.
constexpr int kTile = 32;

__global__ void tiled_gemm_kernel(int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  __shared__ float a_tile[kTile][kTile];
  __shared__ float b_tile[kTile][kTile];
  const int ty = threadIdx.y, tx = threadIdx.x;
  const int64_t row = int64_t(blockIdx.y) * kTile + ty, col = int64_t(blockIdx.x) * kTile + tx;
  float acc = 0;
  for (int64_t k0 = 0; k0 < K; k0 += kTile) {
    a_tile[ty][tx] = (row < M && k0 + tx < K) ? A[row * K + k0 + tx] : 0.f;
    b_tile[ty][tx] = (k0 + ty < K && col < N) ? B[(k0 + ty) * N + col] : 0.f;
    __syncthreads();
#pragma unroll
    for (int k = 0; k < kTile; ++k) acc += a_tile[ty][k] * b_tile[k][tx];
    __syncthreads();  // before the next iteration overwrites the tiles
  }
  if (row < M && col < N) C[row * N + col] = acc;
}

// ---------------------------------------------------------------------------------------
// Launchers

namespace {
void cublas_check(cublasStatus_t s, const char* what) {
  if (s != CUBLAS_STATUS_SUCCESS)
    throw Error(std::string("[cuda] ") + what + " failed: cuBLAS status " + std::to_string(int(s)));
}

// The cuBLAS functions the engine calls, looked up when the first GPU matmul needs them.
// (cublasCreate and friends are macros for the _v2 names, which are the exported symbols.)
struct Cublas {
  SharedLibrary lib{"libcublas.so." + std::to_string(CUBLAS_VER_MAJOR), "cuBLAS, for matmul on the GPU"};
  decltype(&cublasCreate_v2) create = lib.function("cublasCreate_v2");
  decltype(&cublasSetStream_v2) set_stream = lib.function("cublasSetStream_v2");
  decltype(&cublasSgemm_v2) sgemm = lib.function("cublasSgemm_v2");
  decltype(&cublasSgemmStridedBatched) sgemm_strided_batched = lib.function("cublasSgemmStridedBatched");
  // Spelled out: C++ code sees a second, inline cublasGemmEx (an older signature).
  cublasStatus_t (*gemm_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int, const void*,
                            const void*, cudaDataType, int, const void*, cudaDataType, int, const void*, void*,
                            cudaDataType, int, cublasComputeType_t, cublasGemmAlgo_t) = lib.function("cublasGemmEx");
  cublasStatus_t (*gemm_strided_batched_ex)(cublasHandle_t, cublasOperation_t, cublasOperation_t, int, int, int,
                                            const void*, const void*, cudaDataType, int, long long, const void*,
                                            cudaDataType, int, long long, const void*, void*, cudaDataType, int,
                                            long long, int, cublasComputeType_t,
                                            cublasGemmAlgo_t) = lib.function("cublasGemmStridedBatchedEx");
};

cudaDataType cuda_type(DType t) {
  switch (t) {
    case DType::BFloat16: return CUDA_R_16BF;
    case DType::Float16: return CUDA_R_16F;
    case DType::Float32: return CUDA_R_32F;
    default: throw Error(std::string("[matmul] no GPU product for ") + dtype_name(t));
  }
}

const Cublas& cublas() {
  static const Cublas api;  // a failed load throws and is retried by the next call
  return api;
}

cublasHandle_t handle(int device) {
  static std::mutex mu;
  static cublasHandle_t handles[kMaxDevices] = {};
  std::lock_guard<std::mutex> lock(mu);
  if (!handles[device]) {
    set_device(device);
    cublas_check(cublas().create(&handles[device]), "cublasCreate");
    cublas_check(cublas().set_stream(handles[device], stream_of(device)), "cublasSetStream");
  }
  return handles[device];
}
}  // namespace

std::string cublas_path() { return cublas().lib.path(); }

void gemm(int device, const GemmArgs& g) {
  if (g.batch == 0 || g.M == 0 || g.N == 0) return;
  const int64_t limit = 2147483647;  // cuBLAS takes int sizes and leading dimensions
  ENGINE_REQUIRE(g.M <= limit && g.N <= limit && g.K <= limit && g.A.ld <= limit && g.B.ld <= limit && g.batch <= limit,
                 "[matmul] on the GPU: a size or stride over 2^31 (", g.M, "x", g.K, " @ ", g.K, "x", g.N,
                 ") is beyond cuBLAS's int arguments");
  if (g.K == 0) {  // an empty sum: C is all zeros
    check(cudaMemsetAsync(g.C, 0, size_t(g.batch * g.M * g.N) * dtype_size(g.out_dtype), stream_of(device)),
          "cudaMemset");
    return;
  }
  // cuBLAS is column-major. A row-major C (M x N) is a column-major C^T (N x M), and
  // C^T = B^T A^T; a row-major operand read as column-major is its transpose, so a
  // row-major operand goes in untransposed (OP_N) and a column-major one transposed (OP_T).
  const float one = 1, zero = 0;
  const cublasOperation_t op_b = g.B.column_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = g.A.column_major ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasHandle_t h = handle(device);
  const auto* A = static_cast<const float*>(g.A.data);
  const auto* B = static_cast<const float*>(g.B.data);
  auto* C = static_cast<float*>(g.C);
  if (g.dtype == DType::Float32 && g.out_dtype == DType::Float32) {
    if (g.batch == 1) {
      cublas_check(cublas().sgemm(h, op_b, op_a, int(g.N), int(g.M), int(g.K), &one, B, int(g.B.ld), A, int(g.A.ld),
                                  &zero, C, int(g.N)),
                   "cublasSgemm");
    } else {
      cublas_check(cublas().sgemm_strided_batched(h, op_b, op_a, int(g.N), int(g.M), int(g.K), &one, B, int(g.B.ld),
                                                  g.B.batch_stride, A, int(g.A.ld), g.A.batch_stride, &zero, C,
                                                  int(g.N), g.M * g.N, int(g.batch)),
                   "cublasSgemmStridedBatched");
    }
    return;
  }
  // 16-bit operands on the tensor cores, float32 sums (CUBLAS_COMPUTE_32F); cuda_ops::matmul
  // checked the pairing of types.
  const cudaDataType in = cuda_type(g.dtype), out = cuda_type(g.out_dtype);
  if (g.batch == 1) {
    cublas_check(
        cublas().gemm_ex(h, op_b, op_a, int(g.N), int(g.M), int(g.K), &one, g.B.data, in, int(g.B.ld), g.A.data, in,
                         int(g.A.ld), &zero, g.C, out, int(g.N), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmEx");
  } else {
    cublas_check(
        cublas().gemm_strided_batched_ex(h, op_b, op_a, int(g.N), int(g.M), int(g.K), &one, g.B.data, in, int(g.B.ld),
                                         g.B.batch_stride, g.A.data, in, int(g.A.ld), g.A.batch_stride, &zero, g.C, out,
                                         int(g.N), g.M * g.N, int(g.batch), CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
        "cublasGemmStridedBatchedEx");
  }
}

void tiled_gemm(int device, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C) {
  if (M == 0 || N == 0) return;
  const dim3 threads(kTile, kTile), blocks(unsigned((N + kTile - 1) / kTile), unsigned((M + kTile - 1) / kTile));
  tiled_gemm_kernel<<<blocks, threads, 0, stream_of(device)>>>(M, N, K, A, B, C);
  check_launch("tiled_gemm_kernel");
}

}  // namespace engine::cuda
