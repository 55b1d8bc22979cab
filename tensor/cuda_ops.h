// Internal to //tensor: the CUDA side of the ops in ops.h and of Tensor's copies. Each
// public op checks its arguments, then, when a tensor is on a GPU, hands over to the
// function here of the same name, which plans shapes and strides and launches the kernel
// from tensor/cuda/kernels.h on the device's current stream.
//
//   if (cuda_ops::on_cuda(a, b)) return cuda_ops::binary("add", cuda::BinaryOp::Add, a, b);
#pragma once

#include <vector>

#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/tensor.h"

namespace engine::cuda_ops {

// True when any defined argument is on a GPU.
bool on_cuda(const Tensor& a);
bool on_cuda(const Tensor& a, const Tensor& b);

// Elementwise. A CPU tensor with no dims (a scalar) may join a GPU tensor; any other mix
// of devices is an error naming both.
Tensor binary(const char* op, cuda::BinaryOp kind, const Tensor& a, const Tensor& b);
Tensor unary(const char* op, cuda::UnaryOp kind, const Tensor& a, double p0 = 0, double p1 = 0);
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);
void add_(Tensor& a, const Tensor& b, double alpha);
void mul_(Tensor& a, double s);
void copy_(Tensor& dst, const Tensor& src);  // src already broadcast-checked; may be on the CPU
void fill_(Tensor& t, double value);

// Reductions over the dims marked in `reduced` (one flag per dim of a).
Tensor reduce(cuda::ReduceOp op, const Tensor& a, const std::vector<bool>& reduced, bool keepdim, bool mean = false);

// a @ b through cuBLAS: float32 operands into float32; bfloat16 or float16 operands (both
// the same) into their own type or, with out_dtype float32, the unrounded float32 sums.
Tensor matmul(const Tensor& a, const Tensor& b, DType out_dtype);

}  // namespace engine::cuda_ops
