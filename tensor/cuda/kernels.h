// The engine's CUDA kernels, as host functions on raw device pointers. Tensor-level code
// (tensor/cuda_ops.cc, tensor/nn_ops.cc) checks shapes, plans strides and calls these; each launches
// on the device's current stream and checks the launch. Without CUDA in the build each
// throws engine::Error saying so (kernels_none.cc); no device tensor can exist then anyway.
//
//   engine::cuda::Loop<3> loop = ...;   // shape + strides of out, a, b (see make_loop in cuda_ops.cc)
//   engine::cuda::binary(engine::cuda::BinaryOp::Add, device, n, loop, DType::Float32, out,
//                        {a_ptr, 0, DType::Float32}, {nullptr, 2.0, DType::Float32}, 1.0);  // out = a + 2
#pragma once

#include <cstdint>
#include <string>

#include "tensor/dtype.h"
#include "tensor/optim_args.h"

namespace engine::cuda {

constexpr int kMaxDims = 8;

// An elementwise loop over an ndim-dimensional index space for N operands: operand k's
// element at index (i_0, ..., i_{ndim-1}) is at offset[k] + sum_d i_d * stride[k][d]
// (in elements). `dense` says every operand is contiguous in the same order, so element
// i sits at offset[k] + i: the kernel then skips the index arithmetic.
template <int N>
struct Loop {
  int ndim = 0;
  bool dense = false;
  int64_t size[kMaxDims] = {};
  int64_t stride[N][kMaxDims] = {};
  int64_t offset[N] = {};
};

// An input operand: device memory, or (ptr == nullptr) one scalar broadcast everywhere.
struct Operand {
  const void* ptr = nullptr;
  double scalar = 0;
};

// ---- elementwise (elementwise.cu)
// ReluBackward: a where b > 0 or b is NaN, else 0 (a the gradient, b relu's input; one pass).
enum class BinaryOp { Add, Sub, Mul, Div, Pow, Maximum, Minimum, Eq, Ne, Lt, Le, Gt, Ge, AddScaled, ReluBackward };
inline bool is_comparison(BinaryOp op) { return op >= BinaryOp::Eq && op <= BinaryOp::Ge; }
// out = op(a, b); a, b of `dtype`; out of `dtype`, or float32 for comparisons.
// AddScaled is a + alpha * b (the in-place add_ runs it with out aliasing a).
void binary(BinaryOp op, int device, int64_t n, const Loop<3>& loop, DType dtype, void* out, Operand a, Operand b,
            double alpha = 1);

enum class UnaryOp { Neg, Abs, Relu, Exp, Log, Sqrt, Tanh, Sigmoid, Square, PowScalar, Clamp, Scale };
// out = op(in) (p0, p1: the exponent, the clamp bounds, the scale); out and in of `dtype`.
void unary(UnaryOp op, int device, int64_t n, const Loop<2>& loop, DType dtype, void* out, const void* in,
           double p0 = 0, double p1 = 0);
// out = in converted from in_dtype to out_dtype (a strided copy when they are equal).
void convert(int device, int64_t n, const Loop<2>& loop, DType out_dtype, void* out, DType in_dtype, const void* in);
void fill(int device, int64_t n, const Loop<1>& loop, DType dtype, void* out, double value);
// out = cond != 0 ? a : b.
void where(int device, int64_t n, const Loop<4>& loop, DType cond_dtype, const void* cond, DType dtype, void* out,
           Operand a, Operand b);

// ---- reductions (reduce.cu) of a dense (outer, reduced, inner) block:
// out[o * inner + j] = op over r of in[(o * reduced + r) * inner + j], times `scale` for Sum.
// Max and Min propagate NaN; ArgMax writes int64 indices (first on ties, NaN wins).
enum class ReduceOp { Sum, Max, Min, ArgMax };
void reduce(ReduceOp op, int device, DType dtype, int64_t outer, int64_t reduced, int64_t inner, const void* in,
            void* out, double scale = 1);

// ---- matrix products (gemm.cu). C[b] = A[b] @ B[b] for b < batch, with C dense row-major
// (C[b] at C + b * M * N). cuBLAS reads an operand either row-major or column-major, with
// a leading dimension: gemm_layout says which, from the operand's strides, or that it
// can do neither (then the caller copies it into a dense one first).
struct GemmOperand {
  const void* data = nullptr;  // of GemmArgs::dtype
  bool column_major = false;
  int64_t ld = 0;            // the stride between rows (row-major) or columns (column-major)
  int64_t batch_stride = 0;  // 0: the same matrix for every b
};
struct GemmArgs {
  int64_t batch = 1, M = 0, N = 0, K = 0;
  GemmOperand A, B;  // A is M x K, B is K x N
  void* C = nullptr;
  // A and B: float32 (cuBLAS's SGEMM, no TF32), or both bfloat16 or float16 (tensor cores,
  // products summed in float32); C: float32, or the 16-bit type (the sums rounded once).
  DType dtype = DType::Float32, out_dtype = DType::Float32;
};
// For a rows x cols operand with strides (row_stride, col_stride): fills column_major and
// ld, or returns false. A size-1 dim's stride never matters, so it is set to what fits.
inline bool gemm_layout(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, GemmOperand* op) {
  if (cols == 1) col_stride = 1;
  if (rows == 1) row_stride = col_stride == 1 ? (cols > 1 ? cols : 1) : 1;
  if (col_stride == 1 && row_stride >= (cols > 1 ? cols : 1)) {
    op->column_major = false, op->ld = row_stride;
    return true;
  }
  if (row_stride == 1 && col_stride >= (rows > 1 ? rows : 1)) {
    op->column_major = true, op->ld = col_stride;
    return true;
  }
  return false;
}
// cuBLAS is loaded on the first gemm (see shared_library.h), not when the program starts.
void gemm(int device, const GemmArgs& g);
// Loads cuBLAS if it is not yet loaded and returns the file it came from; throws naming the
// library when it cannot be found.
std::string cublas_path();
// The teaching kernel: C = A @ B for dense row-major A (M x K), B (K x N), C (M x N), with
// 32 x 32 tiles staged through shared memory. Correct for any sizes; cuBLAS is faster.
void tiled_gemm(int device, int64_t M, int64_t N, int64_t K, const float* A, const float* B, float* C);

// ---- neural-network kernels (nn.cu)
// Row-wise softmax cross-entropy over dense logits (n, c): probs = softmax(x), loss[i] =
// logsumexp(x_i) - x_i[t_i], rest[i] = 1 - probs[i][t_i] (kept apart for accuracy), and
// counted[i] = 1, or loss = rest = counted = 0 where t_i == ignore_index. A target outside
// [0, c) that is not ignore_index is not read: the first such row's index goes to
// *bad_row (set it to -1 before).
void cross_entropy_forward(int device, int64_t n, int64_t c, const float* logits, const int64_t* targets,
                           int64_t ignore_index, float* probs, float* loss, float* rest, float* counted,
                           int64_t* bad_row);
// dx = (probs - onehot(t)) * (*grad_out) / (*counted), 0 on ignored rows; grad_out and
// counted are device scalars.
void cross_entropy_backward(int device, int64_t n, int64_t c, const float* probs, const float* rest,
                            const int64_t* targets, int64_t ignore_index, const float* grad_out, const float* counted,
                            float* dx);
// im2col / col2im of tensor/nn_ops.h on dense (N, C, H, W) images. cols is (N, C*kh*kw,
// OH*OW), or with batch_in_columns (C*kh*kw, N*OH*OW): the whole batch side by side, so
// that one large GEMM does a convolution layer for every image at once.
void im2col(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* x, float* cols, bool batch_in_columns = false);
void col2im(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* cols, float* x, bool batch_in_columns = false);
// Convolution forward (conv.cu) of dense x (N, C, H, W) and w (O, C, kh, kw) into dense
// out (N, O, OH, OW), plus bias (O) unless it is null: an implicit GEMM (conv_tiles.h)
// that gathers the windows as it goes instead of writing im2col's columns.
void conv2d_forward(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                    int64_t stride, int64_t padding, const float* x, const float* w, const float* bias, float* out);
// Max pooling over dense (planes, H, W); where[k] = flat input index of output k's maximum.
void max_pool2d_forward(int device, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t kernel,
                        int64_t stride, int64_t padding, const float* x, float* out, int64_t* where);
// dx (zeroed, `in_count` elements) += g at where: the scatter of max pooling's backward.
void max_pool2d_backward(int device, int64_t out_count, const float* g, const int64_t* where, float* dx);

// ---- optimizer steps (optim.cu): one fused pass per parameter, the same rules as tensor/optim_steps.cc.
using engine::SgdArgs;
void sgd_step(int device, int64_t n, float* param, const float* grad, float* momentum_buffer, const SgdArgs& a);
using engine::AdamArgs;
void adam_step(int device, int64_t n, float* param, const float* grad, float* exp_avg, float* exp_avg_sq,
               const AdamArgs& a);

// ---- random numbers (random.cu): element i depends only on (seed, i), so any launch
// shape gives the same values. Uniform in [0, 1) with 24 bits, or standard normal.
void fill_uniform(int device, int64_t n, float* out, uint64_t seed);
void fill_normal(int device, int64_t n, float* out, uint64_t seed);

}  // namespace engine::cuda
