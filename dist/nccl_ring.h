// The teaching ring all-reduce on the GPU (ENGINE_NCCL_ALLREDUCE=ring): the schedule of
// allreduce_ring.cc (ring_schedule.h) with NCCL's point-to-point send and recv and a small
// reduce kernel, queued on the communication stream. ProcessGroupNCCL (nccl_group.cu)
// runs it in place of ncclAllReduce when asked; built by nvcc only.
//
//   NcclRing ring{comm, stream, rank, size, [&](const char* what) { wait_ready(what); }};
//   nccl_ring_all_reduce(ring, t, ReduceOp::Avg, &scratch);  // t: float32 or int64, in place
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <functional>

#include "dist/process_group.h"
#include "tensor/tensor.h"

namespace engine::dist {

struct NcclRing {
  ncclComm_t comm;
  cudaStream_t stream;  // where the sends, receives and kernels are queued
  int rank, size;
  // Waits until NCCL has taken a grouped call (a non-blocking communicator may return
  // ncclInProgress), within the group's timeout; `what` names the call.
  std::function<void(const char* what)> wait_ready;
};

// Reduces t across the ring in place. scratch: the receive buffer, grown as needed and kept
// by the caller (the stream may still read it after the call returns).
void nccl_ring_all_reduce(const NcclRing& r, const Tensor& t, ReduceOp op, Tensor* scratch);

}  // namespace engine::dist
