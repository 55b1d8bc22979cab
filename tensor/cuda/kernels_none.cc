// CPU-only build of tensor/cuda/kernels.h: no CUDA toolkit was found when this was built,
// so no device tensor can exist and none of these can be reached; each says so if called.
#include "tensor/check.h"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

namespace {
[[noreturn]] void no_cuda(const char* what) {
  throw Error(std::string("[cuda] ") + what + ": this build has no CUDA (no toolkit was found at build time)");
}
}  // namespace

void binary(BinaryOp, int, int64_t, const Loop<3>&, DType, void*, Operand, Operand, double) { no_cuda("binary"); }
void unary(UnaryOp, int, int64_t, const Loop<2>&, DType, void*, const void*, double, double) { no_cuda("unary"); }
void convert(int, int64_t, const Loop<2>&, DType, void*, DType, const void*) { no_cuda("convert"); }
void fill(int, int64_t, const Loop<1>&, DType, void*, double) { no_cuda("fill"); }
void where(int, int64_t, const Loop<4>&, DType, const void*, DType, void*, Operand, Operand) { no_cuda("where"); }
void reduce(ReduceOp, int, DType, int64_t, int64_t, int64_t, const void*, void*, double) { no_cuda("reduce"); }
void gemm(int, const GemmArgs&) { no_cuda("gemm"); }
std::string cublas_path() { no_cuda("cublas_path"); }
void tiled_gemm(int, int64_t, int64_t, int64_t, const float*, const float*, float*) { no_cuda("tiled_gemm"); }
void conv2d_forward(int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                    const float*, const float*, float*) {
  no_cuda("conv2d_forward");
}
void cross_entropy_forward(int, int64_t, int64_t, const float*, const int64_t*, int64_t, float*, float*, float*, float*,
                           int64_t*) {
  no_cuda("cross_entropy_forward");
}
void cross_entropy_backward(int, int64_t, int64_t, const float*, const float*, const int64_t*, int64_t, const float*,
                            const float*, float*) {
  no_cuda("cross_entropy_backward");
}
void im2col(int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*, float*, bool) {
  no_cuda("im2col");
}
void col2im(int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*, float*, bool) {
  no_cuda("col2im");
}
void max_pool2d_forward(int, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, int64_t, const float*,
                        float*, int64_t*) {
  no_cuda("max_pool2d_forward");
}
void max_pool2d_backward(int, int64_t, const float*, const int64_t*, float*) { no_cuda("max_pool2d_backward"); }
void sgd_step(int, int64_t, float*, const float*, float*, const SgdArgs&) { no_cuda("sgd_step"); }
void adam_step(int, int64_t, float*, const float*, float*, float*, const AdamArgs&) { no_cuda("adam_step"); }
void fill_uniform(int, int64_t, float*, uint64_t) { no_cuda("fill_uniform"); }
void fill_normal(int, int64_t, float*, uint64_t) { no_cuda("fill_normal"); }

}  // namespace engine::cuda
