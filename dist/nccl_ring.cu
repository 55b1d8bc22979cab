// The teaching ring all-reduce on the GPU (see nccl_ring.h).
#include "dist/nccl_ring.h"

#include <algorithm>
#include <vector>

#include "dist/nccl_api.h"
#include "dist/ring_schedule.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace engine::dist {

namespace {

template <class T>
__global__ void reduce_kernel(T* acc, const T* in, int64_t n, int op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const T a = acc[i], b = in[i];
    acc[i] = op == 2 ? (b < a ? b : a) : op == 3 ? (b > a ? b : a) : op == 4 ? a * b : a + b;
  }
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x)
    x[i] *= s;
}

}  // namespace

// The schedule of allreduce_ring.cc: n - 1 steps of reduce-scatter (each rank sends one
// segment on and adds the one it receives), then n - 1 of all-gather.
void nccl_ring_all_reduce(const NcclRing& r, const Tensor& t, ReduceOp op, Tensor* scratch) {
  // Its kernels add float32 and int64 only (NCCL's own all-reduce takes the 16-bit types).
  ENGINE_REQUIRE(t.dtype() == DType::Float32 || t.dtype() == DType::Int64, "[all_reduce] the teaching ring ",
                 "(ENGINE_NCCL_ALLREDUCE=ring) reduces float32 and int64, got ", dtype_name(t.dtype()));
  const int n = r.size, next = (r.rank + 1) % n, prev = (r.rank + n - 1) % n;
  if (n == 1) return;
  const int64_t count = t.numel();
  const size_t es = dtype_size(t.dtype());
  char* data = t.bytes();
  const std::vector<int64_t> b = ring::equal_segments(count, n);
  int64_t largest = 0;
  for (int k = 0; k < n; ++k) largest = std::max(largest, b[k + 1] - b[k]);
  // The scratch outlives this call: the communication stream may still be reading it
  // when we return, and a freed block could be handed to the compute stream at once.
  const size_t need = size_t(std::max<int64_t>(largest, 1)) * es;
  if (!scratch->defined() || scratch->nbytes() < need)
    *scratch = empty({int64_t(need / 8 + 1)}, DType::Int64, t.device());
  char* tmp = scratch->bytes();
  const int op_code = op == ReduceOp::Min ? 2 : op == ReduceOp::Max ? 3 : op == ReduceOp::Product ? 4 : 1;
  auto exchange = [&](int send_seg, char* recv_to, int recv_seg) {
    nccl_check(nccl().GroupStart(), "ncclGroupStart");
    nccl_check(nccl().Send(data + size_t(b[send_seg]) * es, size_t(b[send_seg + 1] - b[send_seg]), nccl_type(t.dtype()),
                           next, r.comm, r.stream),
               "ncclSend");
    nccl_check(
        nccl().Recv(recv_to, size_t(b[recv_seg + 1] - b[recv_seg]), nccl_type(t.dtype()), prev, r.comm, r.stream),
        "ncclRecv");
    nccl_check(nccl().GroupEnd(), "ncclGroupEnd");
    r.wait_ready("ncclGroupEnd");
  };
  for (int s = 0; s < n - 1; ++s) {  // reduce-scatter
    const auto [send_seg, recv_seg] = ring::reduce_scatter_step(r.rank, n, s);
    exchange(send_seg, tmp, recv_seg);
    const int64_t len = b[recv_seg + 1] - b[recv_seg];
    const int blocks = int(std::min<int64_t>((len + 255) / 256, 4096));
    if (len == 0) continue;
    if (t.dtype() == DType::Float32)
      reduce_kernel<<<blocks, 256, 0, r.stream>>>(reinterpret_cast<float*>(data) + b[recv_seg],
                                                  reinterpret_cast<const float*>(tmp), len, op_code);
    else
      reduce_kernel<<<blocks, 256, 0, r.stream>>>(reinterpret_cast<int64_t*>(data) + b[recv_seg],
                                                  reinterpret_cast<const int64_t*>(tmp), len, op_code);
    cuda_check(cudaGetLastError(), "reduce_kernel launch");
  }
  const int owned = ring::owned_after_reduce_scatter(r.rank, n);
  if (op == ReduceOp::Avg && b[owned + 1] > b[owned]) {
    const int64_t len = b[owned + 1] - b[owned];
    scale_kernel<<<int(std::min<int64_t>((len + 255) / 256, 4096)), 256, 0, r.stream>>>(
        reinterpret_cast<float*>(data) + b[owned], len, 1.0f / float(n));
  }
  for (int s = 0; s < n - 1; ++s) {  // all-gather
    const auto [send_seg, recv_seg] = ring::all_gather_step(owned, n, s);
    exchange(send_seg, data + size_t(b[recv_seg]) * es, recv_seg);
  }
}

}  // namespace engine::dist
