// The "nccl" backend (see nccl_group.h). Kernels first, then the process group.
#include <cuda_runtime.h>
#include <nccl.h>

#include <cstring>
#include <string>
#include <vector>

#include "dist/nccl_group.h"
#include "tensor/check.h"
#include "tensor/cuda/runtime.h"

namespace engine::dist {

// ---------------------------------------------------------------------------------------
// Kernels

template <class T>
__global__ void reduce_kernel(T* acc, const T* in, int64_t n, int op) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) {
    const T a = acc[i], b = in[i];
    acc[i] = op == 2 ? (b < a ? b : a) : op == 3 ? (b > a ? b : a) : op == 4 ? a * b : a + b;
  }
}

__global__ void scale_kernel(float* x, int64_t n, float s) {
  for (int64_t i = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; i < n; i += int64_t(blockDim.x) * gridDim.x) x[i] *= s;
}

// ---------------------------------------------------------------------------------------
// The process group

namespace {

void nccl_check(ncclResult_t r, const char* what) {
  if (r != ncclSuccess) throw Error(std::string("[nccl] ") + what + " failed: " + ncclGetErrorString(r));
}
void cuda_check(cudaError_t r, const char* what) {
  if (r != cudaSuccess) throw Error(std::string("[nccl] ") + what + " failed: " + cudaGetErrorString(r));
}

ncclDataType_t nccl_type(DType t) { return t == DType::Float32 ? ncclFloat32 : ncclInt64; }
ncclRedOp_t nccl_op(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum: return ncclSum;
    case ReduceOp::Avg: return ncclAvg;
    case ReduceOp::Min: return ncclMin;
    case ReduceOp::Max: return ncclMax;
    case ReduceOp::Product: return ncclProd;
  }
  return ncclSum;
}

void* device_ptr(const Tensor& t) {
  return t.bytes();
}

class ProcessGroupNCCL : public ProcessGroup {
 public:
  ProcessGroupNCCL(std::shared_ptr<TCPStore> store, int rank, int size, int device)
      : ProcessGroup(rank, size), store_(std::move(store)), device_(device) {
    cuda::set_device(device_);
    // Rank 0 creates the communicator's id; everyone else reads it from the store.
    ncclUniqueId id;
    if (rank == 0) {
      nccl_check(ncclGetUniqueId(&id), "ncclGetUniqueId");
      store_->set("nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      const std::string s = store_->get("nccl/id");
      ENGINE_REQUIRE(s.size() == sizeof id, "[nccl] malformed communicator id in the store");
      std::memcpy(&id, s.data(), sizeof id);
    }
    nccl_check(ncclCommInitRank(&comm_, size, id, rank), "ncclCommInitRank");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    const char* algo = std::getenv("ENGINE_NCCL_ALLREDUCE");
    ring_ = algo && std::string(algo) == "ring";
  }
  ~ProcessGroupNCCL() override {
    cudaStreamSynchronize(stream_);
    ncclCommDestroy(comm_);
    cudaStreamDestroy(stream_);
  }
  std::string backend() const override { return "nccl"; }

  Work all_reduce(Tensor t, ReduceOp op) override {
    check(t, "all_reduce");
    if (ring_) ring_all_reduce(t, op);
    else nccl_check(ncclAllReduce(device_ptr(t), device_ptr(t), size_t(t.numel()), nccl_type(t.dtype()), nccl_op(op),
                                  comm_, stream_), "ncclAllReduce");
    return done();
  }
  Work broadcast(Tensor t, int root) override {
    check(t, "broadcast");
    nccl_check(ncclBroadcast(device_ptr(t), device_ptr(t), size_t(t.numel()), nccl_type(t.dtype()), root, comm_, stream_),
               "ncclBroadcast");
    return done();
  }
  Work all_gather(std::vector<Tensor>* outputs, Tensor input) override {
    check(input, "all_gather");
    Tensor all = empty({int64_t(size_) * input.numel()}, input.dtype(), input.device());
    nccl_check(ncclAllGather(device_ptr(input), device_ptr(all), size_t(input.numel()), nccl_type(input.dtype()), comm_,
                             stream_), "ncclAllGather");
    Work w = done();
    outputs->clear();
    for (int r = 0; r < size_; ++r) outputs->push_back(all.narrow(0, int64_t(r) * input.numel(), input.numel()).view(input.shape()));
    return w;
  }
  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    nccl_check(ncclReduceScatter(device_ptr(input), device_ptr(output), size_t(output.numel()), nccl_type(input.dtype()),
                                 nccl_op(op), comm_, stream_), "ncclReduceScatter");
    return done();
  }
  Work barrier() override {
    Tensor one = ones({1}).to(Device::cuda(device_));
    return all_reduce(one, ReduceOp::Sum);
  }
  Work send(Tensor t, int dst) override {
    check(t, "send");
    nccl_check(ncclSend(device_ptr(t), size_t(t.numel()), nccl_type(t.dtype()), dst, comm_, stream_), "ncclSend");
    return done();
  }
  Work recv(Tensor t, int src) override {
    check(t, "recv");
    nccl_check(ncclRecv(device_ptr(t), size_t(t.numel()), nccl_type(t.dtype()), src, comm_, stream_), "ncclRecv");
    return done();
  }

 private:
  void check(const Tensor& t, const char* op) {
    ENGINE_REQUIRE(t.defined() && t.device() == Device::cuda(device_), "[", op, "] the nccl backend needs tensors on cuda:",
                   device_, "; got one on ", t.defined() ? t.device().str() : "nothing");
    ENGINE_REQUIRE(t.is_contiguous(), "[", op, "] needs a contiguous tensor");
  }
  Work done() {
    cuda_check(cudaStreamSynchronize(stream_), "waiting for the collective");
    Work w;
    w.finish();
    return w;
  }

  // The teaching ring (same schedule as allreduce_ring.cc), with NCCL point-to-point.
  void ring_all_reduce(const Tensor& t, ReduceOp op) {
    const int n = size_, next = (rank_ + 1) % n, prev = (rank_ + n - 1) % n;
    if (n == 1) return;
    const int64_t count = t.numel();
    const size_t es = dtype_size(t.dtype());
    char* data = static_cast<char*>(device_ptr(t));
    std::vector<int64_t> b(size_t(n) + 1);
    for (int k = 0; k <= n; ++k) b[k] = int64_t(k) * count / n;
    int64_t largest = 0;
    for (int k = 0; k < n; ++k) largest = std::max(largest, b[k + 1] - b[k]);
    Tensor scratch = empty({std::max<int64_t>(largest, 1)}, t.dtype(), t.device());
    char* tmp = static_cast<char*>(device_ptr(scratch));
    const int op_code = op == ReduceOp::Min ? 2 : op == ReduceOp::Max ? 3 : op == ReduceOp::Product ? 4 : 1;
    auto exchange = [&](int send_seg, char* recv_to, int recv_seg) {
      nccl_check(ncclGroupStart(), "ncclGroupStart");
      nccl_check(ncclSend(data + size_t(b[send_seg]) * es, size_t(b[send_seg + 1] - b[send_seg]), nccl_type(t.dtype()),
                          next, comm_, stream_), "ncclSend");
      nccl_check(ncclRecv(recv_to, size_t(b[recv_seg + 1] - b[recv_seg]), nccl_type(t.dtype()), prev, comm_, stream_),
                 "ncclRecv");
      nccl_check(ncclGroupEnd(), "ncclGroupEnd");
    };
    for (int s = 0; s < n - 1; ++s) {  // reduce-scatter
      const int send_seg = ((rank_ - s) % n + n) % n, recv_seg = ((rank_ - s - 1) % n + n) % n;
      exchange(send_seg, tmp, recv_seg);
      const int64_t len = b[recv_seg + 1] - b[recv_seg];
      const int blocks = int(std::min<int64_t>((len + 255) / 256, 4096));
      if (len == 0) continue;
      if (t.dtype() == DType::Float32)
        reduce_kernel<<<blocks, 256, 0, stream_>>>(reinterpret_cast<float*>(data) + b[recv_seg],
                                                    reinterpret_cast<const float*>(tmp), len, op_code);
      else
        reduce_kernel<<<blocks, 256, 0, stream_>>>(reinterpret_cast<int64_t*>(data) + b[recv_seg],
                                                    reinterpret_cast<const int64_t*>(tmp), len, op_code);
      cuda_check(cudaGetLastError(), "reduce_kernel launch");
    }
    const int owned = (rank_ + 1) % n;
    if (op == ReduceOp::Avg && b[owned + 1] > b[owned]) {
      const int64_t len = b[owned + 1] - b[owned];
      scale_kernel<<<int(std::min<int64_t>((len + 255) / 256, 4096)), 256, 0, stream_>>>(
          reinterpret_cast<float*>(data) + b[owned], len, 1.0f / float(n));
    }
    for (int s = 0; s < n - 1; ++s) {  // all-gather
      const int send_seg = ((owned - s) % n + n) % n, recv_seg = ((owned - s - 1) % n + n) % n;
      exchange(send_seg, data + size_t(b[recv_seg]) * es, recv_seg);
    }
  }

  std::shared_ptr<TCPStore> store_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;
  bool ring_ = false;
};

}  // namespace

std::unique_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TCPStore> store, int rank, int size, int local_rank,
                                              std::chrono::milliseconds) {
  const int gpus = cuda::device_count();
  ENGINE_REQUIRE(gpus > 0, "[init_process_group] backend \"nccl\" needs a CUDA GPU, but this machine has none (",
                 cuda::unavailable_reason(), "). Use \"gloo\" to train on the CPU.");
  ENGINE_REQUIRE(local_rank < gpus, "[init_process_group] LOCAL_RANK=", local_rank, " but this machine has only ", gpus,
                 " GPU(s): start at most one process per GPU (--nproc_per_node=", gpus, ")");
  return std::make_unique<ProcessGroupNCCL>(std::move(store), rank, size, local_rank);
}

}  // namespace engine::dist
