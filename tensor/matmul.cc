// matmul from ops.h: batch dims broadcast, then one GEMM per batch entry, each reading its
// operands through their strides (a transposed view costs nothing extra).
#include "tensor/cuda_ops.h"
#include "tensor/gemm.h"
#include "tensor/loops.h"
#include "tensor/matmul_plan.h"
#include "tensor/ops.h"

namespace engine {

Tensor matmul(const Tensor& a, const Tensor& b) { return matmul(a, b, Tensor()); }

Tensor matmul(const Tensor& a, const Tensor& b, const Tensor& into) {
  ENGINE_REQUIRE(a.defined() && b.defined(), "[matmul] got an undefined tensor");
  ENGINE_REQUIRE(a.dtype() == DType::Float32 && b.dtype() == DType::Float32, "[matmul] needs float32 operands, got ",
                 dtype_name(a.dtype()), " @ ", dtype_name(b.dtype()));
  ENGINE_REQUIRE(a.dim() >= 2 && b.dim() >= 2, "[matmul] needs 2-D or batched operands, got ", shape_str(a.shape()),
                 " @ ", shape_str(b.shape()), "; unsqueeze a vector first");
  const int64_t M = a.size(-2), K = a.size(-1), N = b.size(-1);
  ENGINE_REQUIRE(b.size(-2) == K, "[matmul] inner dimensions differ: ", shape_str(a.shape()), " @ ",
                 shape_str(b.shape()));

  const detail::MatmulPlan plan = detail::plan_matmul(a, b);
  if (into.defined())
    ENGINE_REQUIRE(into.shape() == plan.out_shape && into.dtype() == DType::Float32 && into.is_contiguous() &&
                       into.device() == a.device(),
                   "[matmul] the output must be a contiguous float32 tensor of shape ", shape_str(plan.out_shape),
                   " on ", a.device().str(), ", got ", shape_str(into.shape()));
  if (cuda_ops::on_cuda(a, b)) {
    Tensor out = cuda_ops::matmul(a, b);
    if (!into.defined()) return out;
    Tensor dst = into;
    return dst.copy_(out);
  }
  const Shape& batch = plan.batch;
  const Tensor ea = a.expand(plan.a_shape), eb = b.expand(plan.b_shape);
  Tensor out = into.defined() ? into : empty(plan.out_shape);

  const float* pa = static_cast<const float*>(ea.storage()->data());
  const float* pb = static_cast<const float*>(eb.storage()->data());
  float* pc = out.data<float>();
  const size_t nb = batch.size();
  const Strides sa(ea.strides().begin(), ea.strides().begin() + nb);
  const Strides sb(eb.strides().begin(), eb.strides().begin() + nb);
  const Strides sc(out.strides().begin(), out.strides().begin() + nb);
  detail::for_each_offset<3>(batch, {sc, sa, sb}, {0, ea.offset(), eb.offset()}, [&](const std::array<int64_t, 3>& o) {
    gemm(M, N, K, pa + o[1], ea.strides()[nb], ea.strides()[nb + 1], pb + o[2], eb.strides()[nb], eb.strides()[nb + 1],
         pc + o[0], N, 1, false);
  });
  return out;
}

}  // namespace engine
