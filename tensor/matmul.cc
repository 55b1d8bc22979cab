// matmul from ops.h: batch dims broadcast, then one GEMM per batch entry, each reading its
// operands through their strides (a transposed view costs nothing extra). bfloat16
// operands go to the bfloat16 GEMM (gemm_bf16.h).
#include "tensor/cuda_ops.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/loops.h"
#include "tensor/matmul_plan.h"
#include "tensor/ops.h"

namespace engine {

namespace {

// `min_dim`: 1 where a vector operand is allowed (matmul(a, b)), 2 for the out= form.
void check_operands(const Tensor& a, const Tensor& b, int64_t min_dim) {
  ENGINE_REQUIRE(a.defined() && b.defined(), "[matmul] got an undefined tensor");
  ENGINE_REQUIRE(a.dtype() == b.dtype() && is_floating(a.dtype()),
                 "[matmul] needs two float32, two bfloat16 or two float16 operands, got ", dtype_name(a.dtype()), " @ ",
                 dtype_name(b.dtype()));
  ENGINE_REQUIRE(a.dim() >= min_dim && b.dim() >= min_dim, "[matmul] needs ",
                 min_dim == 1 ? "operands of at least 1 dim" : "2-D or batched operands for an out= product", ", got ",
                 shape_str(a.shape()), " @ ", shape_str(b.shape()));
  // b's rows: its second-to-last dim, or its only one for a vector.
  ENGINE_REQUIRE(b.size(b.dim() == 1 ? 0 : -2) == a.size(-1),
                 "[matmul] inner dimensions differ: ", shape_str(a.shape()), " @ ", shape_str(b.shape()));
}

// One GEMM per entry of the plan's batch: `gemm` gets (M, N, K, A, its strides, B, its
// strides, C, N, 1, false) with A and B of element type T read in place and C a block of
// `out` (contiguous float32).
template <class T, class Gemm>
void each_product(const detail::MatmulPlan& plan, const Tensor& a, const Tensor& b, Tensor& out, Gemm gemm) {
  const Tensor ea = a.expand(plan.a_shape), eb = b.expand(plan.b_shape);
  const T* pa = static_cast<const T*>(ea.storage()->data());
  const T* pb = static_cast<const T*>(eb.storage()->data());
  float* pc = out.data<float>();
  const size_t nb = plan.batch.size();
  const Strides sa(ea.strides().begin(), ea.strides().begin() + nb);
  const Strides sb(eb.strides().begin(), eb.strides().begin() + nb);
  const Strides sc(out.strides().begin(), out.strides().begin() + nb);
  detail::for_each_offset<3>(
      plan.batch, {sc, sa, sb}, {0, ea.offset(), eb.offset()}, [&](const std::array<int64_t, 3>& o) {
        gemm(plan.M, plan.N, plan.K, pa + o[1], ea.strides()[nb], ea.strides()[nb + 1], pb + o[2], eb.strides()[nb],
             eb.strides()[nb + 1], pc + o[0], plan.N, int64_t(1), false);
      });
}

// A float16 operand widened to float32 for the float32 GEMM (exact: the products of two
// widened float16 values are those of the float16 values). A transposed matrix (a layer's
// weight as linear uses it) is widened in its memory order and stays a transposed view,
// which the GEMM reads through its strides: to() alone would gather it element by element
// into row-major order, a strided copy that took 15% of the MLP's float16 step.
Tensor widened(const Tensor& t) {
  if (t.dim() == 2 && !t.is_contiguous() && t.transpose(0, 1).is_contiguous())
    return t.transpose(0, 1).to(DType::Float32).transpose(0, 1);
  return t.to(DType::Float32);
}

// bfloat16 @ bfloat16: products summed in float32 by the bfloat16 GEMM, the result
// rounded to bfloat16 once (as PyTorch). float16 has no CPU kernel: it is widened.
Tensor matmul_half(const Tensor& a, const Tensor& b) {
  if (a.dtype() == DType::Float16) return matmul(widened(a), widened(b)).to(a.dtype());
  const detail::MatmulPlan plan = detail::plan_matmul(a, b);
  Tensor out = empty(plan.out_shape);
  each_product<bfloat16>(plan, a, b, out, [](auto... args) { gemm_bf16(args...); });
  return out.to(DType::BFloat16);
}

}  // namespace

// A vector is a (1, K) row on the left and a (K, 1) column on the right; the product of
// those matrices, with the dim each vector added taken out again.
Tensor matmul(const Tensor& a, const Tensor& b) {
  check_operands(a, b, 1);
  if (a.dim() >= 2 && b.dim() >= 2) return matmul(a, b, Tensor());
  Tensor out = matmul(a.dim() == 1 ? a.unsqueeze(0) : a, b.dim() == 1 ? b.unsqueeze(1) : b, Tensor());
  if (b.dim() == 1) out = out.squeeze(-1);                      // (..., M, 1) -> (..., M)
  if (a.dim() == 1) out = out.squeeze(b.dim() == 1 ? -1 : -2);  // (..., 1, N) -> (..., N); (1,) -> ()
  return out;
}

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& into) {
  check_operands(a, b, 2);
  const detail::MatmulPlan plan = detail::plan_matmul(a, b);
  if (into.defined())
    ENGINE_REQUIRE(into.shape() == plan.out_shape && into.dtype() == DType::Float32 && into.is_contiguous() &&
                       into.device() == a.device(),
                   "[matmul] the output must be a contiguous float32 tensor of shape ", shape_str(plan.out_shape),
                   " on ", a.device().str(), ", got ", shape_str(into.shape()), " ", dtype_name(into.dtype()));
  if (share_memory(into, a) || share_memory(into, b)) {  // the GEMM would read what it has already written
    Tensor dst = into;
    return dst.copy_(matmul(a, b, empty(into.shape(), DType::Float32, into.device())));
  }
  if (cuda_ops::on_cuda(a, b)) {
    // cuBLAS: float32 sums, rounded to the 16-bit operands' type unless float32 is asked for.
    const DType out_dtype = is_half(a.dtype()) && !into.defined() ? a.dtype() : DType::Float32;
    Tensor out = cuda_ops::matmul(a, b, out_dtype);
    if (!into.defined()) return out;
    Tensor dst = into;
    return dst.copy_(out);
  }
  if (is_half(a.dtype())) {
    if (!into.defined()) return matmul_half(a, b);
    // 16-bit operands into float32: the float32 sums themselves, never rounded to 16 bits.
    if (a.dtype() == DType::Float16) return matmul(widened(a), widened(b), into);
    Tensor out = into;
    each_product<bfloat16>(plan, a, b, out, [](auto... args) { gemm_bf16(args...); });
    return out;
  }
  Tensor out = into.defined() ? into : empty(plan.out_shape);
  each_product<float>(plan, a, b, out, [](auto... args) { gemm(args...); });
  return out;
}

}  // namespace engine
