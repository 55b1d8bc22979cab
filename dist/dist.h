// torch.distributed, in C++: the default process group and the collectives on it.
//
//   dist::init_process_group("gloo");                  // reads RANK, WORLD_SIZE, MASTER_ADDR, ...
//   int rank = dist::get_rank(), world = dist::get_world_size();
//   dist::all_reduce(t);                               // sum over ranks, in place
//   dist::Work w = dist::all_reduce(g, dist::ReduceOp::Avg, /*async_op=*/true);
//   w.wait();
//   dist::barrier();
//   dist::destroy_process_group();                     // no thread, socket or port left
//
// Backends: "gloo" (our CPU backend, ProcessGroupTCP: TCP between machines, shared memory
// within one; "tcp" is accepted as another name) and "nccl" (GPUs). get_backend() says
// "gloo" or "nccl", as PyTorch does.
// Launch one process per device with the launcher (dist/launch.cc), which sets the
// environment torchrun sets; Slurm's (SLURM_PROCID, ...) and Open MPI's
// (OMPI_COMM_WORLD_RANK, ...) variables are understood too.
#pragma once

#include <chrono>
#include <memory>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace engine::dist {

struct InitOptions {
  // "env://" (the environment), "tcp://HOST:PORT" (rank and world_size given here or in
  // RANK/WORLD_SIZE), or "file:///shared/path" (rank 0 writes where it listens into the
  // file, its machine's addresses too where other machines may read it: file_rendezvous.h).
  std::string init_method = "env://";
  int rank = -1;
  int world_size = -1;
  // 0: ENGINE_DIST_TIMEOUT (seconds) if set, else 300 s (see TCPGroupOptions for why). A
  // peer whose machine stops answering TCP is taken for lost sooner, after
  // ENGINE_LINK_TIMEOUT seconds (30 by default; TCPGroupOptions::link_timeout).
  std::chrono::milliseconds timeout{0};
  // The job's secret, checked on every connection. "": ENGINE_JOB_TOKEN (the launcher sets it).
  std::string token;
};

// Where this process sits in the job, as the launcher (or Slurm, or mpirun) described it.
struct LaunchInfo {
  int rank = -1, world_size = -1, local_rank = 0, local_world_size = 1;
  std::string master_addr, source;  // source: "torchrun-style", "slurm" or "openmpi"
  int master_port = -1;
  bool rank_given = false;         // RANK (or its Slurm / Open MPI name) was set, whatever its value
  bool local_world_given = false;  // likewise LOCAL_WORLD_SIZE
};
// Reads the launch environment. Throws naming the variable that is missing or malformed.
LaunchInfo read_launch_env(bool need_master = true);

void init_process_group(const std::string& backend = "gloo", const InitOptions& options = {});
void destroy_process_group();
bool is_initialized();
// Which restart of the job this process belongs to: TORCHELASTIC_RESTART_COUNT (0 on the
// first attempt), or, on a machine whose launcher was started afresh after the others had
// restarted the job, the restart it joined in init_process_group. A program that resumes
// from saved state after a restart asks this rather than the variable.
int restart_count();
int get_rank();
int get_world_size();
int get_local_rank();
int get_local_world_size();
std::string get_backend();
ProcessGroup& default_group();

// Collectives on the default group. With async_op the call returns at once and the Work
// must be waited on before the tensor is read; otherwise it returns a finished Work.
Work all_reduce(Tensor tensor, ReduceOp op = ReduceOp::Sum, bool async_op = false);
Work broadcast(Tensor tensor, int src, bool async_op = false);
Work all_gather(std::vector<Tensor>& outputs, Tensor input, bool async_op = false);
Work reduce_scatter(Tensor output, Tensor input, ReduceOp op = ReduceOp::Sum, bool async_op = false);
Work barrier(bool async_op = false);
Work send(Tensor tensor, int dst, bool async_op = false);
Work recv(Tensor tensor, int src, bool async_op = false);
// gather: on dst, outputs[r] = rank r's input. scatter: rank r's output = src's inputs[r].
// reduce: dst's tensor = op over every rank's. all_to_all: PyTorch's all_to_all_single
// (input cut along dim 0 into one piece per rank; empty splits: equal pieces).
Work gather(std::vector<Tensor>& outputs, Tensor input, int dst = 0, bool async_op = false);
Work scatter(Tensor output, const std::vector<Tensor>& inputs, int src = 0, bool async_op = false);
Work reduce(Tensor tensor, int dst, ReduceOp op = ReduceOp::Sum, bool async_op = false);
Work all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits = {},
                std::vector<int64_t> input_splits = {}, bool async_op = false);
// A group of some of the default group's ranks (every rank calls it with the same list);
// nullptr on the ranks not in it. Its collectives are its methods: g->all_reduce(t).wait().
std::shared_ptr<ProcessGroup> new_group(const std::vector<int>& ranks);

}  // namespace engine::dist
