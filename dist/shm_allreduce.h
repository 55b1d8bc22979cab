// The shared-memory path: all_reduce and every other collective between processes on one
// machine without sockets.
//
//   auto shm = ShmAllReduce::create(store, "shm/", {0, 1}, rank, timeout, job_tag);  // null: none
//   shm->agree(call, deadline, describe);     // every collective starts here
//   shm->all_reduce(data, n, DType::Float32, ReduceOp::Sum, deadline);
//
// When every rank runs on the same host, TCP's copies (user to kernel to user) are pure
// overhead: ranks can read each other's data directly. Rank 0 creates one shared segment
// with a control block per rank and a staging buffer per rank; each all_reduce then goes,
// chunk by chunk (the chunk cut into one segment per rank):
//
//   1. every rank copies the segments the others reduce into its buffer      barrier
//   2. rank r reduces segment r, in rank order, from its own data and the
//      others' buffers, writing the result into its data and its buffer       barrier
//   3. every rank copies each segment k != r from rank k's buffer out
//
// Each element is reduced once by one rank, in a fixed order, so all ranks get the same
// bits; each rank copies (size-1)/size of the data in and out, never its own segment.
// Buffers alternate between two halves so that step 1 of the next chunk never overwrites
// data another rank is still copying out (the barrier in between orders them).
//
// agree() is the shared start of every collective: each rank posts its call (collective,
// op, dtype, count, sequence number) and all compare after a barrier, so a mismatched call
// is reported at once on every rank. Waiting ranks check that their peers are alive: a
// rank that dies, or whose group is destroyed while it lives on, is named within
// milliseconds, and any rank that fails posts an abort that every waiter sees.
#pragma once

#include <sys/types.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "tensor/tensor.h"

#include "dist/process_group.h"
#include "dist/socket.h"
#include "dist/store.h"

namespace engine::dist {

struct CallDescriptor {
  uint64_t seq = 0, count = 0;
  uint32_t coll = 0, op = 0, dtype = 0;
  int32_t root = -1;
};

class ShmAllReduce {
 public:
  // Creates (member 0) or attaches (the others) a segment shared by the process group's
  // ranks `ranks` (all on this machine; this process is ranks[rank]), its name passed
  // through `store` under keys starting with `scope`. Returns nullptr when there is
  // nothing to share (one member) or shared memory is unavailable (then on every member).
  // Every wait is bounded by `timeout` and watches the other members' pids; no path, failed
  // or not, leaves the segment's name in /dev/shm. `job_tag` (shm_job_tag) starts the name.
  // Errors name ranks by their rank in the process group.
  static std::unique_ptr<ShmAllReduce> create(TCPStore& store, const std::string& scope, const std::vector<int>& ranks,
                                              int rank, std::chrono::milliseconds timeout, const std::string& job_tag);
  ~ShmAllReduce();

  // Posts this rank's call and checks that all ranks made the same one; throws naming both.
  // `describe` turns a descriptor into words for the error message.
  void agree(const CallDescriptor& mine, Deadline deadline, std::string (*describe)(const CallDescriptor&));
  // Sums (etc.) `count` elements at `data` across the members, in place.
  void all_reduce(char* data, int64_t count, DType dtype, ReduceOp op, Deadline deadline);
  // The other collectives, staged through the buffers (shm_collectives.cc), for a group
  // whose ranks are all members, member r being rank r.
  // Every rank's `bytes` at `mine` into `out`, rank r's at out + r * bytes (`mine` may be
  // that block of `out`); or rank r's at blocks[r], wherever each lies.
  void all_gather(char* out, const char* mine, size_t bytes, Deadline deadline);
  void all_gather(const std::vector<char*>& blocks, const char* mine, size_t bytes, Deadline deadline);
  // `out` (m elements) = the reduction over the ranks of block `rank` of `in` (size x m
  // elements; `out` may be that block of `in`), in rank order.
  void reduce_scatter(char* out, const char* in, int64_t m, DType dtype, ReduceOp op, Deadline deadline);
  // `root`'s `bytes` at `data` into every rank's `data`.
  void broadcast(char* data, size_t bytes, int root, Deadline deadline);
  // `root`'s data = all_reduce's result (the same bits); the others' data are unchanged.
  // root < 0: every rank's (all_reduce's staged path).
  void reduce(char* data, int64_t count, DType dtype, ReduceOp op, int root, Deadline deadline);
  // `root` gets every rank's `bytes` at `mine`, rank r's at outs[r] (outs: root only;
  // outs[root] may be `mine`).
  void gather(const std::vector<char*>& outs, const char* mine, size_t bytes, int root, Deadline deadline);
  // Rank r gets `root`'s ins[r] (ins: root only), `bytes` of it, at `out`.
  void scatter(char* out, const std::vector<const char*>& ins, size_t bytes, int root, Deadline deadline);
  // Rank r sends bytes [in_at[k], in_at[k+1]) of `in` to rank k, and receives rank k's
  // piece for it at [out_at[k], out_at[k+1]) of `out` (size + 1 offsets each). Pieces may
  // differ in size between pairs; the caller has checked that both ends of each pair agree,
  // and gives every rank the same `largest` piece (the number of chunks follows from it).
  void all_to_all(char* out, const std::vector<size_t>& out_at, const char* in, const std::vector<size_t>& in_at,
                  size_t largest, Deadline deadline);
  // Returns once every member has called it (bounded by `deadline`; a dead member is named).
  void barrier(Deadline deadline);
  // Tells every waiting rank that this one failed, with why.
  void abort(const std::string& why);

  // A buffer of `numel` floats in a new segment that every rank maps, one slice per rank
  // (collective). all_reduce on memory inside this rank's slice works in place: each rank
  // reduces its segment straight from every rank's slice and writes the result into all
  // of them, with no staging and no copying out.
  Tensor shared_buffer(TCPStore& store, int64_t numel);

 private:
  ShmAllReduce(void* base, size_t bytes, int rank, int size, size_t chunk, std::chrono::milliseconds timeout);
  // Polls the store until every rank r has set prefix + r; names a rank that died (by pid)
  // or, at the deadline, the first rank missing.
  void wait_for_ranks(TCPStore& store, const std::string& prefix, const std::vector<pid_t>& pids, Deadline deadline,
                      const char* what);
  // The registered slices that hold [data, data + bytes) in this rank's slice, if any:
  // returns the matching addresses in every rank's slice.
  bool find_slices(const char* data, size_t bytes, std::vector<char*>* peers) const;
  struct Segment {
    char* base;
    size_t per_rank;
  };
  std::vector<std::shared_ptr<Segment>> segments_;
  int shared_buffers_ = 0;
  void check_peers_alive();
  std::string abort_reason() const;  // why a failing rank aborted the group
  struct Control;
  struct Header;
  Header* header() const;
  Control* control(int r) const;
  char* buffer(int r, int half) const;
  int next_half();  // the half of the staging buffers the next chunk uses

  void* base_;
  size_t bytes_;
  int rank_, size_;
  size_t chunk_;  // bytes per rank per half-buffer
  std::chrono::milliseconds timeout_;
  uint32_t half_ = 0;
  bool spin_ = false;         // waits spin before yielding: there are at least as many cores as ranks
  uint64_t posted_ = 0;       // how many calls this rank has posted
  std::string current_call_;  // the call in progress, in words, for error messages
  std::string job_tag_;
  void* sanitizer_key_ = nullptr;  // ThreadSanitizer builds only: the barrier's stand-in (shm_allreduce.cc)
  std::vector<int> ranks_;         // the members' ranks in the process group
  std::string scope_;              // the members' store keys start with it
};

// This machine, as "hostname/boot id/pid namespace/shm:dev:inode": processes with equal
// ids see each other's pids and the same /dev/shm, so they can share memory.
std::string machine_id();

// The tag every shared-memory name of the job with this token starts with
// (/dev/shm/engine-<tag>-...): the launcher removes what a killed job left behind.
std::string shm_job_tag(const std::string& token);

}  // namespace engine::dist
