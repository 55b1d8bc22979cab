// Internal to //tensor: the shapes of a batched matmul (...,M,K) @ (...,K,N), shared by the
// CPU GEMM path (matmul.cc) and the cuBLAS path (cuda_ops.cc). Not part of the public API.
#pragma once

#include "tensor/tensor.h"

namespace engine::detail {

struct MatmulPlan {
  int64_t M = 0, K = 0, N = 0;
  Shape batch;                        // the operands' batch dims, broadcast together
  Shape out_shape, a_shape, b_shape;  // batch + (M,N), (M,K), (K,N)
};

// Operands already checked (2-D or more, inner dims equal).
inline MatmulPlan plan_matmul(const Tensor& a, const Tensor& b) {
  MatmulPlan p;
  p.M = a.size(-2), p.K = a.size(-1), p.N = b.size(-1);
  p.batch = broadcast_shapes(Shape(a.shape().begin(), a.shape().end() - 2),
                             Shape(b.shape().begin(), b.shape().end() - 2), "matmul");
  p.out_shape = p.a_shape = p.b_shape = p.batch;
  p.out_shape.insert(p.out_shape.end(), {p.M, p.N});
  p.a_shape.insert(p.a_shape.end(), {p.M, p.K});
  p.b_shape.insert(p.b_shape.end(), {p.K, p.N});
  return p;
}

}  // namespace engine::detail
