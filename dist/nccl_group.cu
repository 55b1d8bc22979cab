// The "nccl" backend (see nccl_group.h); the NCCL library itself is reached through
// nccl_api.h, and the teaching ring through nccl_ring.h.
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/nccl_api.h"
#include "dist/nccl_group.h"
#include "dist/nccl_ring.h"
#include "dist/watchdog.h"
#include "tensor/check.h"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

namespace engine::dist {

// ---------------------------------------------------------------------------------------
// The process group

namespace {

const char* op_name(ReduceOp op) { return reduce_op_name(op); }

class ProcessGroupNCCL : public ProcessGroup {
 public:
  // prefix: where this group's keys live in the store ("" for the default group; new_group
  // gives each subgroup its own).
  ProcessGroupNCCL(std::shared_ptr<TCPStore> store, int rank, int size, int device, std::chrono::milliseconds timeout,
                   std::string prefix = "")
      : ProcessGroup(rank, size),
        store_(std::move(store)),
        device_(device),
        timeout_(timeout),
        prefix_(std::move(prefix)) {
    cuda::set_device(device_);
    // Rank 0 creates the communicator's id; everyone else reads it from the store.
    ncclUniqueId id;
    if (rank == 0) {
      nccl_check(nccl().GetUniqueId(&id), "ncclGetUniqueId");
      store_->set(prefix_ + "nccl/id", std::string(reinterpret_cast<const char*>(&id), sizeof id));
    } else {
      const std::string s = store_->get(prefix_ + "nccl/id");
      ENGINE_REQUIRE(s.size() == sizeof id, "[nccl] malformed communicator id in the store");
      std::memcpy(&id, s.data(), sizeof id);
    }
    // A non-blocking communicator: no NCCL call can hang the host, and ncclCommAbort can
    // end whatever is stuck (the watchdog below uses it).
    ncclConfig_t config = NCCL_CONFIG_INITIALIZER;
    config.blocking = 0;
    const ncclResult_t r = nccl().CommInitRankConfig(&comm_, size, id, rank, &config);
    if (r != ncclInProgress) nccl_check(r, "ncclCommInitRankConfig");
    wait_ready("ncclCommInitRankConfig", "creating the NCCL communicator: another rank has not joined");
    cuda_check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
    compute_ = static_cast<cudaStream_t>(cuda::current_stream(device_));
    cuda_check(cudaEventCreateWithFlags(&ready_, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventCreateWithFlags(&done_, cudaEventDisableTiming), "cudaEventCreate");
    const char* algo = std::getenv("ENGINE_NCCL_ALLREDUCE");
    ring_ =
        algo && *algo && parse_choice(algo, "[init_process_group] ENGINE_NCCL_ALLREDUCE", {"nccl", "ring"}) == "ring";
    dog_ = std::make_unique<Watchdog>(
        rank, timeout_, [this](const std::string&) { aborted_ = true, nccl().CommAbort(comm_); },
        [this] { return async_error(); });
  }
  ~ProcessGroupNCCL() override {
    dog_.reset();
    if (!aborted_) cudaStreamSynchronize(stream_), nccl().CommDestroy(comm_);
    cudaEventDestroy(ready_);
    cudaEventDestroy(done_);
    cudaStreamDestroy(stream_);
  }
  std::string backend() const override { return "nccl"; }

  Tensor shared_buffer(int64_t numel) override { return zeros({numel}, DType::Float32, Device::cuda(device_)); }

  Work all_reduce(Tensor t, ReduceOp op) override {
    return run(t, std::string("all_reduce(") + op_name(op) + ", " + shape_of(t) + ")", [&](Tensor& d) {
      if (ring_)
        nccl_ring_all_reduce(ring_setup(), d, op, &scratch_);
      else
        nccl_check(nccl().AllReduce(d.bytes(), d.bytes(), size_t(d.numel()), nccl_type(d.dtype()), nccl_op(op), comm_,
                                    stream_),
                   "ncclAllReduce");
    });
  }
  Work broadcast(Tensor t, int root) override {
    ENGINE_REQUIRE(root >= 0 && root < size_, "[broadcast] root ", root, " is outside 0..", size_ - 1);
    return run(t, "broadcast(root " + std::to_string(root) + ", " + shape_of(t) + ")", [&](Tensor& d) {
      nccl_check(nccl().Broadcast(d.bytes(), d.bytes(), size_t(d.numel()), nccl_type(d.dtype()), root, comm_, stream_),
                 "ncclBroadcast");
    });
  }
  Work all_gather(std::vector<Tensor>* outputs, Tensor input) override {
    check(input, "all_gather");
    const bool given = given_outputs("all_gather", *outputs, input, size_);  // refused before anything is sent
    Tensor all = empty({int64_t(size_) * input.numel()}, input.dtype(), input.device());
    begin();
    nccl_check(
        nccl().AllGather(input.bytes(), all.bytes(), size_t(input.numel()), nccl_type(input.dtype()), comm_, stream_),
        "ncclAllGather");
    Work w = end("all_gather(" + shape_of(input) + ")");
    if (!given) outputs->clear();
    for (int r = 0; r < size_; ++r) {
      Tensor block = all.narrow(0, int64_t(r) * input.numel(), input.numel()).view(input.shape());
      if (given)
        (*outputs)[size_t(r)].copy_(block);  // on the compute stream, which waits for the collective
      else
        outputs->push_back(block);
    }
    return w;
  }
  Work all_gather_into_tensor(Tensor output, Tensor input) override {
    check(input, "all_gather_into_tensor");
    check(output, "all_gather_into_tensor");
    ENGINE_REQUIRE(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
                   "[all_gather_into_tensor] output must hold world size x input");
    // NCCL works in place only where the input is this rank's block of the output.
    if (share_memory(input, output) && input.bytes() != output.bytes() + size_t(rank_) * input.nbytes())
      input = input.clone();
    begin();
    nccl_check(nccl().AllGather(input.bytes(), output.bytes(), size_t(input.numel()), nccl_type(input.dtype()), comm_,
                                stream_),
               "ncclAllGather");
    return end("all_gather(" + shape_of(input) + ")");
  }
  Work reduce_scatter(Tensor output, Tensor input, ReduceOp op) override {
    check(input, "reduce_scatter");
    check(output, "reduce_scatter");
    ENGINE_REQUIRE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                   "[reduce_scatter] input of ", input.numel(), " ", dtype_name(input.dtype()),
                   " must hold world size (", size_, ") x output (", output.numel(), " ", dtype_name(output.dtype()),
                   ")");
    // NCCL works in place only where the output is this rank's block of the input; an output
    // elsewhere in the input gets its result through a block of its own.
    Tensor into = output;
    if (share_memory(input, output) && output.bytes() != input.bytes() + size_t(rank_) * output.nbytes())
      into = empty(output.shape(), output.dtype(), output.device());
    begin();
    nccl_check(nccl().ReduceScatter(input.bytes(), into.bytes(), size_t(output.numel()), nccl_type(input.dtype()),
                                    nccl_op(op), comm_, stream_),
               "ncclReduceScatter");
    Work w = end(std::string("reduce_scatter(") + op_name(op) + ", " + shape_of(input) + ")");
    if (into.storage() != output.storage()) output.copy_(into);  // on the compute stream, which waits for it
    return w;
  }
  Work barrier() override {
    Tensor one = ones({1}, DType::Float32, Device::cuda(device_));
    Work w = all_reduce(one, ReduceOp::Sum);
    // A barrier is a host-side wait, bounded by the watchdog: an aborted collective ends.
    cuda_check(cudaStreamSynchronize(compute_), "barrier");
    if (std::string e = dog_->error(); !e.empty()) throw Error(e);
    return w;
  }
  Work send(Tensor t, int dst) override {
    check(t, "send");
    ENGINE_REQUIRE(dst >= 0 && dst < size_ && dst != rank_, "[send] destination ", dst, " must be another rank in 0..",
                   size_ - 1);
    begin();
    nccl_check(nccl().Send(t.bytes(), size_t(t.numel()), nccl_type(t.dtype()), dst, comm_, stream_), "ncclSend");
    return end("send(to " + std::to_string(dst) + ", " + shape_of(t) + ")");
  }
  Work recv(Tensor t, int src) override {
    check(t, "recv");
    ENGINE_REQUIRE(src >= 0 && src < size_ && src != rank_, "[recv] source ", src, " must be another rank in 0..",
                   size_ - 1);
    begin();
    nccl_check(nccl().Recv(t.bytes(), size_t(t.numel()), nccl_type(t.dtype()), src, comm_, stream_), "ncclRecv");
    return end("recv(from " + std::to_string(src) + ", " + shape_of(t) + ")");
  }
  Work reduce(Tensor t, int dst, ReduceOp op) override {
    ENGINE_REQUIRE(dst >= 0 && dst < size_, "[reduce] root ", dst, " is outside 0..", size_ - 1);
    return run(t, std::string("reduce(") + op_name(op) + ", dst " + std::to_string(dst) + ", " + shape_of(t) + ")",
               [&](Tensor& d) {
                 // In place on dst; the others' buffers are only read.
                 nccl_check(nccl().Reduce(d.bytes(), d.bytes(), size_t(d.numel()), nccl_type(d.dtype()), nccl_op(op),
                                          dst, comm_, stream_),
                            "ncclReduce");
               });
  }
  // gather, scatter and all_to_all: NCCL's point-to-point calls, grouped so that they run
  // together (NCCL's own recipe for these collectives).
  Work gather(std::vector<Tensor>* outputs, Tensor input, int dst) override {
    check(input, "gather");
    ENGINE_REQUIRE(dst >= 0 && dst < size_, "[gather] root ", dst, " is outside 0..", size_ - 1);
    ENGINE_REQUIRE(outputs != nullptr || rank_ != dst, "[gather] outputs is null on the destination rank ", dst);
    const bool given = rank_ == dst && given_outputs("gather", *outputs, input, size_);
    if (outputs && !given) outputs->clear();
    std::vector<Tensor> got;  // received whole, then copied into the caller's tensors if it gave them
    begin();
    nccl_check(nccl().GroupStart(), "ncclGroupStart");
    if (rank_ == dst) {
      for (int r = 0; r < size_; ++r) {
        got.push_back(empty(input.shape(), input.dtype(), input.device()));
        if (r != rank_)
          nccl_check(
              nccl().Recv(got.back().bytes(), size_t(input.numel()), nccl_type(input.dtype()), r, comm_, stream_),
              "ncclRecv");
      }
    } else {
      nccl_check(nccl().Send(input.bytes(), size_t(input.numel()), nccl_type(input.dtype()), dst, comm_, stream_),
                 "ncclSend");
    }
    nccl_check(nccl().GroupEnd(), "ncclGroupEnd");
    if (rank_ == dst)
      cuda_check(
          cudaMemcpyAsync(got[size_t(rank_)].bytes(), input.bytes(), input.nbytes(), cudaMemcpyDeviceToDevice, stream_),
          "cudaMemcpyAsync");
    Work w = end("gather(dst " + std::to_string(dst) + ", " + shape_of(input) + ")");
    for (size_t r = 0; r < got.size(); ++r)
      if (given)
        (*outputs)[r].copy_(got[r]);  // on the compute stream, which waits for the collective
      else
        outputs->push_back(got[r]);
    return w;
  }
  Work scatter(Tensor output, const std::vector<Tensor>& inputs, int src) override {
    check(output, "scatter");
    ENGINE_REQUIRE(src >= 0 && src < size_, "[scatter] root ", src, " is outside 0..", size_ - 1);
    if (rank_ == src) {
      ENGINE_REQUIRE(int(inputs.size()) == size_, "[scatter] src ", src, " gave ", inputs.size(),
                     " inputs; the world size is ", size_);
      for (const Tensor& in : inputs) {
        check(in, "scatter");
        ENGINE_REQUIRE(in.numel() == output.numel() && in.dtype() == output.dtype(),
                       "[scatter] every input must have the output's size and dtype");
      }
    }
    begin();
    nccl_check(nccl().GroupStart(), "ncclGroupStart");
    if (rank_ == src) {
      for (int r = 0; r < size_; ++r)
        if (r != rank_)
          nccl_check(nccl().Send(inputs[size_t(r)].bytes(), size_t(output.numel()), nccl_type(output.dtype()), r, comm_,
                                 stream_),
                     "ncclSend");
    } else {
      nccl_check(nccl().Recv(output.bytes(), size_t(output.numel()), nccl_type(output.dtype()), src, comm_, stream_),
                 "ncclRecv");
    }
    nccl_check(nccl().GroupEnd(), "ncclGroupEnd");
    if (rank_ == src)
      cuda_check(cudaMemcpyAsync(output.bytes(), inputs[size_t(rank_)].bytes(), output.nbytes(),
                                 cudaMemcpyDeviceToDevice, stream_),
                 "cudaMemcpyAsync");
    return end("scatter(src " + std::to_string(src) + ", " + shape_of(output) + ")");
  }
  Work all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits,
                  std::vector<int64_t> input_splits) override {
    check(input, "all_to_all");
    check(output, "all_to_all");
    if (share_memory(input, output)) input = input.clone();  // the grouped sends and receives run together
    const std::vector<int64_t> in_at = offsets(input, input_splits, "input"),
                               out_at = offsets(output, output_splits, "output");
    const int64_t row = input.dim() == 0 || input.size(0) == 0 ? 1 : input.numel() / input.size(0);
    ENGINE_REQUIRE(in_at[size_t(rank_) + 1] - in_at[size_t(rank_)] == out_at[size_t(rank_) + 1] - out_at[size_t(rank_)],
                   "[all_to_all] rank ", rank_, " sends itself a piece of another size than it expects");
    const size_t es = dtype_size(input.dtype());
    begin();
    nccl_check(nccl().GroupStart(), "ncclGroupStart");
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      nccl_check(nccl().Send(input.bytes() + size_t(in_at[size_t(r)] * row) * es,
                             size_t((in_at[size_t(r) + 1] - in_at[size_t(r)]) * row), nccl_type(input.dtype()), r,
                             comm_, stream_),
                 "ncclSend");
      nccl_check(nccl().Recv(output.bytes() + size_t(out_at[size_t(r)] * row) * es,
                             size_t((out_at[size_t(r) + 1] - out_at[size_t(r)]) * row), nccl_type(input.dtype()), r,
                             comm_, stream_),
                 "ncclRecv");
    }
    nccl_check(nccl().GroupEnd(), "ncclGroupEnd");
    const int64_t mine = (in_at[size_t(rank_) + 1] - in_at[size_t(rank_)]) * row;
    cuda_check(cudaMemcpyAsync(output.bytes() + size_t(out_at[size_t(rank_)] * row) * es,
                               input.bytes() + size_t(in_at[size_t(rank_)] * row) * es, size_t(mine) * es,
                               cudaMemcpyDeviceToDevice, stream_),
               "cudaMemcpyAsync");
    return end("all_to_all(" + shape_of(input) + ")");
  }
  // A subgroup gets a communicator of its own, its id passed through the store under a
  // prefix of its own (every rank calls new_group in the same order, so the numbers agree).
  std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks) override {
    const std::vector<int> members = checked_group_ranks(ranks, size_);
    const std::string prefix = prefix_ + "g" + std::to_string(groups_made_++) + "/";
    const auto me = std::find(members.begin(), members.end(), rank_);
    if (me == members.end()) return nullptr;
    return std::make_shared<ProcessGroupNCCL>(store_, int(me - members.begin()), int(members.size()), device_, timeout_,
                                              prefix);
  }

 private:
  void check(const Tensor& t, const char* op) {
    ENGINE_REQUIRE(t.defined() && t.device() == Device::cuda(device_), "[", op,
                   "] the nccl backend needs tensors on cuda:", device_, "; got one on ",
                   t.defined() ? t.device().str() : "nothing");
    ENGINE_REQUIRE(t.is_contiguous(), "[", op, "] needs a contiguous tensor");
  }

  // Collectives run on their own stream so that they overlap the kernels of backward.
  // begin(): the communication stream waits for what the compute stream has queued so
  // far (the bucket's gradients were copied there). end(): the compute stream waits for
  // the collective, so whatever the caller queues next sees its result. Neither blocks
  // the host, so Work is complete at once from the host's side, as PyTorch's NCCL work
  // after wait(): ordering is the streams' job.
  void begin() {
    if (std::string e = dog_->error(); !e.empty()) throw Error(e);  // the group was aborted: say why, every time
    cuda_check(cudaEventRecord(ready_, compute_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(stream_, ready_, 0), "cudaStreamWaitEvent");
  }
  // `what`: the call in the CPU backend's words, for the watchdog's message.
  Work end(const std::string& what) {
    wait_ready(what.c_str(), nullptr);
    cuda_check(cudaEventRecord(done_, stream_), "cudaEventRecord");
    cuda_check(cudaStreamWaitEvent(compute_, done_, 0), "cudaStreamWaitEvent");
    // The watchdog asks an event of its own whether the collective has finished.
    cudaEvent_t e = nullptr;
    cuda_check(cudaEventCreateWithFlags(&e, cudaEventDisableTiming), "cudaEventCreate");
    cuda_check(cudaEventRecord(e, stream_), "cudaEventRecord");
    auto event = std::shared_ptr<CUevent_st>(e, [](cudaEvent_t ev) { cudaEventDestroy(ev); });
    dog_->watch(what + " #" + std::to_string(calls_++),
                [event] { return cudaEventQuery(event.get()) != cudaErrorNotReady; });
    return Work();  // complete for the host: the compute stream waits on the collective, and the watchdog watches it
  }

  // With a non-blocking communicator a call may return before NCCL has finished taking it
  // (ncclInProgress): wait for that, within the timeout. `stuck`: what to say if it never
  // ends (nullptr: leave it to the watchdog).
  void wait_ready(const char* what, const char* stuck) {
    const auto deadline = std::chrono::steady_clock::now() + timeout_;
    ncclResult_t r = ncclInProgress;
    while (true) {
      nccl_check(nccl().CommGetAsyncError(comm_, &r), "ncclCommGetAsyncError");
      if (r != ncclInProgress) break;
      if (std::chrono::steady_clock::now() > deadline) {
        aborted_ = true;
        nccl().CommAbort(comm_);
        throw Error(std::string("[dist] timed out after ") + std::to_string(timeout_.count() / 1000) + " s " +
                    (stuck ? stuck : what) + " on rank " + std::to_string(rank_) + " (nccl)");
      }
      std::this_thread::yield();
    }
    nccl_check(r, what);
  }

  // "" while the communicator is healthy; NCCL's words for what went wrong otherwise.
  std::string async_error() {
    ncclResult_t r = ncclSuccess;
    if (nccl().CommGetAsyncError(comm_, &r) != ncclSuccess || r == ncclSuccess || r == ncclInProgress) return "";
    return std::string("NCCL reported: ") + nccl().GetErrorString(r);
  }

  // A collective on `t` in place. A CPU tensor (the small metadata DDP exchanges) goes to
  // the GPU and back, which waits for the result.
  template <class F>
  Work run(Tensor& t, const std::string& what, F collective) {
    if (t.defined() && t.device().is_cpu()) {
      Tensor d = t.contiguous().to(Device::cuda(device_));
      begin();
      collective(d);
      Work w = end(what);
      t.copy_(d.to(Device::cpu()));
      return w;
    }
    check(t, what.substr(0, what.find('(')).c_str());
    begin();
    collective(t);
    return end(what);
  }
  // Row offsets of all_to_all's pieces of `t` (all_to_all_rows checks them).
  std::vector<int64_t> offsets(const Tensor& t, const std::vector<int64_t>& splits, const char* which) const {
    const std::vector<int64_t> rows = all_to_all_rows(which, splits, t, size_);
    std::vector<int64_t> at(rows.size() + 1, 0);
    for (size_t r = 0; r < rows.size(); ++r) at[r + 1] = at[r] + rows[r];
    return at;
  }
  // What the teaching ring needs of this group.
  NcclRing ring_setup() {
    return {comm_, stream_, rank_, size_, [this](const char* what) { wait_ready(what, nullptr); }};
  }
  static std::string shape_of(const Tensor& t) { return std::to_string(t.numel()) + " x " + dtype_name(t.dtype()); }

  std::shared_ptr<TCPStore> store_;
  int device_;
  ncclComm_t comm_ = nullptr;
  cudaStream_t stream_ = nullptr;   // communication
  cudaStream_t compute_ = nullptr;  // the engine's kernels (cuda::current_stream)
  cudaEvent_t ready_ = nullptr, done_ = nullptr;
  Tensor scratch_;  // the teaching ring's receive buffer
  bool ring_ = false;
  std::chrono::milliseconds timeout_;
  std::unique_ptr<Watchdog> dog_;  // bounds every collective (see watchdog.h)
  std::atomic<bool> aborted_{false};
  uint64_t calls_ = 0;
  std::string prefix_;   // this group's keys in the store
  int groups_made_ = 0;  // by new_group
};

}  // namespace

std::string nccl_path() { return nccl().lib.path(); }

std::unique_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TCPStore> store, int rank, int size, int local_rank,
                                              std::chrono::milliseconds timeout) {
  const int gpus = cuda::device_count();
  ENGINE_REQUIRE(gpus > 0, "[init_process_group] backend \"nccl\" needs a CUDA GPU, but this machine has none (",
                 cuda::unavailable_reason(), "). Use \"gloo\" to train on the CPU.");
  ENGINE_REQUIRE(local_rank < gpus, "[init_process_group] LOCAL_RANK=", local_rank, " but this machine has only ", gpus,
                 " GPU(s): start at most one process per GPU (--nproc_per_node=", gpus, ")");
  return std::make_unique<ProcessGroupNCCL>(std::move(store), rank, size, local_rank, timeout);
}

}  // namespace engine::dist
