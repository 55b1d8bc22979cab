// Math on tensors: elementwise ops with NumPy broadcasting, reductions, and matmul.
// Every op accepts any strides (views included) and returns a new contiguous tensor.
//
//   Tensor a = randn({4, 3}), b = randn({3});
//   Tensor c = a * b + 1.0;              // b broadcasts over a's rows
//   Tensor m = mean(a, {0});             // (3,): mean over dim 0
//   Tensor s = sum(a, {1}, true);        // (4,1): keepdim
//   Tensor p = matmul(a, a.transpose(0, 1));  // (4,4); the transpose is read in place
//
// Errors name the op and the shapes: "[add] shapes (2,3) and (4,) do not broadcast ...".
// Comparisons return float32 masks (1 where true, 0 elsewhere), so mean(eq(a, b)) is a
// fraction. Ops that only make sense on floats (exp, log, ...) reject int64 tensors.
#pragma once

#include <vector>

#include "tensor/tensor.h"

namespace engine {

// ---- binary, with broadcasting; both operands must have the same dtype, except that two
// floating dtypes (bfloat16 or float16 with float32, or with each other) meet in float32,
// as PyTorch promotes them
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);  // int64: truncates; / 0 and INT64_MIN / -1 are errors
Tensor pow(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);
// Picks a where cond != 0, else b; all three broadcast together.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);

// ---- unary
Tensor neg(const Tensor& a);
Tensor abs(const Tensor& a);
Tensor exp(const Tensor& a);
Tensor log(const Tensor& a);
Tensor sqrt(const Tensor& a);
Tensor tanh(const Tensor& a);
Tensor sigmoid(const Tensor& a);
Tensor relu(const Tensor& a);  // NaN stays NaN, as in PyTorch
// ReLU's backward: grad where x > 0 or x is NaN, else 0 (one pass over dense CPU tensors).
Tensor relu_backward(const Tensor& grad, const Tensor& x);
Tensor pow(const Tensor& a, double exponent);
Tensor clamp(const Tensor& a, double lo, double hi);

// ---- scalar forms: the scalar becomes a tensor of a's dtype
Tensor operator+(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a, const Tensor& b);
Tensor operator*(const Tensor& a, const Tensor& b);
Tensor operator/(const Tensor& a, const Tensor& b);
Tensor operator-(const Tensor& a);
// tensor op double: the double becomes a 0-d tensor of the tensor's dtype. For an int64
// tensor it must be a whole number in int64's range (3 * 1.5 is refused, not truncated to
// 3 * 1; PyTorch would promote to float): convert first with t.to(DType::Float32).
Tensor operator+(const Tensor& a, double s);
Tensor operator-(const Tensor& a, double s);
Tensor operator*(const Tensor& a, double s);
Tensor operator/(const Tensor& a, double s);
Tensor operator+(double s, const Tensor& a);
Tensor operator-(double s, const Tensor& a);
Tensor operator*(double s, const Tensor& a);
Tensor operator/(double s, const Tensor& a);

// ---- in place: a op= b, b broadcast to a's shape (a itself never broadcasts)
Tensor& add_(Tensor& a, const Tensor& b, double alpha = 1);  // a += alpha * b
Tensor& mul_(Tensor& a, double s);

// ---- reductions. `dims` empty means all dims; keepdim leaves reduced dims as size 1.
Tensor sum(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor max(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor min(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
// Variance with Bessel's correction by default (divides by n - correction), as PyTorch.
Tensor var(const Tensor& a, const std::vector<int64_t>& dims = {}, bool keepdim = false, int64_t correction = 1);
// var's divisor: max(0, count - correction), as PyTorch's; var divides by 0 when it is 0.
double var_denominator(int64_t count, int64_t correction);
// Index (int64) of the largest value along `dim`, first one on ties; over all elements
// (of the flattened tensor) when called without a dim.
Tensor argmax(const Tensor& a, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& a);
// Whether every element is finite (no inf, no NaN); true for an empty tensor and for
// int64. One pass, vectorised for contiguous float32 on the CPU.
bool all_finite(const Tensor& a);

// Sums `grad` down to `shape`, undoing a broadcast (used by autograd for every
// broadcasting op): summed over leading extra dims and over dims where shape has 1.
Tensor sum_to(const Tensor& grad, const Shape& shape);

// ---- matrix product of the last two dims, with batch dims broadcast: (...,M,K) @ (...,K,N).
// Transposed or strided operands are read in place by the GEMM, never copied. A vector
// operand works as in PyTorch: (K,) on the left is the row (1,K), on the right the column
// (K,1), and the dim it added is dropped: (M,K) @ (K,) is (M,), (K,) @ (K,) is 0-d.
Tensor matmul(const Tensor& a, const Tensor& b);
// The same for 2-D or batched operands, written into `out` (contiguous float32, of the
// result's shape and on the operands' device), which it returns. On the CPU the GEMM writes
// there directly; on the GPU the product is computed, then copied in. For bfloat16 or
// float16 operands `out` gets the float32 sums as they are, not rounded to 16 bits. An
// `out` that shares memory with an operand gets the product made apart, then copied in.
Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& out);

}  // namespace engine
