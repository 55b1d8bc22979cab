// The NCCL library as the "nccl" backend (nccl_group.cu, built by nvcc only) reaches it:
// its functions looked up in libnccl at run time (so a binary without NCCL installed still
// starts, and says what is missing only when a nccl group is made), its errors turned into
// engine errors, and the engine's dtypes and reduce ops mapped to NCCL's.
//
//   nccl_check(nccl().AllReduce(in, out, n, nccl_type(t.dtype()), nccl_op(op), comm, stream), "ncclAllReduce");
#pragma once

#include <cuda_runtime.h>
#include <nccl.h>

#include <string>

#include "dist/process_group.h"
#include "tensor/check.h"
#include "tensor/cuda/shared_library.h"

namespace engine::dist {

// The NCCL functions the backend calls, looked up when the first nccl group is made (each
// member is named as the C function without its "nccl" prefix).
struct Nccl {
  cuda::SharedLibrary lib{"libnccl.so." + std::to_string(NCCL_MAJOR), "NCCL, for the \"nccl\" backend"};
  decltype(&ncclGetErrorString) GetErrorString = lib.function("ncclGetErrorString");
  decltype(&ncclGetUniqueId) GetUniqueId = lib.function("ncclGetUniqueId");
  decltype(&ncclCommInitRankConfig) CommInitRankConfig = lib.function("ncclCommInitRankConfig");
  decltype(&ncclCommGetAsyncError) CommGetAsyncError = lib.function("ncclCommGetAsyncError");
  decltype(&ncclCommAbort) CommAbort = lib.function("ncclCommAbort");
  decltype(&ncclCommDestroy) CommDestroy = lib.function("ncclCommDestroy");
  decltype(&ncclAllReduce) AllReduce = lib.function("ncclAllReduce");
  decltype(&ncclBroadcast) Broadcast = lib.function("ncclBroadcast");
  decltype(&ncclAllGather) AllGather = lib.function("ncclAllGather");
  decltype(&ncclReduceScatter) ReduceScatter = lib.function("ncclReduceScatter");
  decltype(&ncclReduce) Reduce = lib.function("ncclReduce");
  decltype(&ncclSend) Send = lib.function("ncclSend");
  decltype(&ncclRecv) Recv = lib.function("ncclRecv");
  decltype(&ncclGroupStart) GroupStart = lib.function("ncclGroupStart");
  decltype(&ncclGroupEnd) GroupEnd = lib.function("ncclGroupEnd");
};

inline const Nccl& nccl() {
  static const Nccl api;  // a failed load throws and is retried by the next call
  return api;
}

// ncclInProgress is not a failure: a non-blocking communicator is still taking the call
// (ProcessGroupNCCL::wait_ready waits for it before the next one).
inline void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess && r != ncclInProgress)
    throw Error(std::string("[nccl] ") + what + " failed: " + nccl().GetErrorString(r));
}
inline void cuda_check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw Error(std::string("[nccl] ") + what + " failed: " + cudaGetErrorString(r));
}

inline ncclDataType_t nccl_type(DType t) {
  switch (t) {
    case DType::Float32: return ncclFloat32;
    case DType::Int64: return ncclInt64;
    case DType::BFloat16: return ncclBfloat16;
    default: return ncclFloat16;
  }
}
inline ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

}  // namespace engine::dist
