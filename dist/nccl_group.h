// The "nccl" backend: collectives on CUDA tensors through NVIDIA's NCCL, one process per
// GPU (device = local rank). The NCCL unique id travels through the rendezvous store.
//
// all_reduce has two algorithms, chosen by ENGINE_NCCL_ALLREDUCE:
//   "nccl" (default): ncclAllReduce, NCCL's own tuned implementation;
//   "ring": the same ring as the CPU backend (allreduce_ring.cc), written with ncclSend /
//           ncclRecv and a reduction kernel of ours: the teaching version.
//
// The communicator is non-blocking, so no NCCL call can hang the host: its creation waits
// at most the group's timeout (ENGINE_DIST_TIMEOUT), and a watchdog thread (watchdog.h)
// aborts the communicator (ncclCommAbort) when a collective is still running at the
// timeout or NCCL reports a failed peer. The next call on the group, and barrier(), then
// throw the CPU backend's kind of error: "[dist] timed out after 300 s in all_reduce(...)".
//
// Built with nvcc when the CUDA toolkit is found; otherwise make_nccl_group() explains
// that this build has no CUDA. On a machine without a GPU it says so and suggests "gloo".
//
// Programs reach it through the process group, one process per GPU (launch starts them):
//
//   dist::init_process_group("nccl");                    // this rank's GPU: LOCAL_RANK
//   Tensor g = ones({1024}).to(Device::cuda(dist::get_local_rank()));
//   dist::all_reduce(g);                                 // ENGINE_NCCL_ALLREDUCE=ring: ours
#pragma once

#include <chrono>
#include <memory>
#include <string>

#include "dist/process_group.h"
#include "dist/store.h"

namespace engine::dist {

// NCCL is loaded when the first nccl group is made (see tensor/cuda/shared_library.h).
std::unique_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TCPStore> store, int rank, int size, int local_rank,
                                              std::chrono::milliseconds timeout);

// Loads NCCL if it is not yet loaded and returns the file it came from; throws naming the
// library when it cannot be found.
std::string nccl_path();

}  // namespace engine::dist
