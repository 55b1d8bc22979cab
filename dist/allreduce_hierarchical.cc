// The hierarchical all-reduce: for a job on several machines with several ranks on each.
//
// Within a machine, shared memory is the fastest way to combine data (no kernel copies);
// between machines, the ring is bandwidth-optimal. So:
//
//   1. every machine reduces its ranks' data through shared memory: each local rank
//      holds its machine's partial result;
//   2. one leader per machine (its lowest rank) runs the TCP ring over the leaders on
//      that partial result: each leader holds the whole result;
//   3. each leader shares it back: a shared-memory sum to which the others add zeros
//      (-0.0, which leaves every value's bits as they are), so every local rank ends with
//      the leader's bits;
//   4. for Avg, every rank divides the same sum by the world size.
//
// Only the leaders touch the network: each sends 2(m-1)/m of the data for m machines,
// instead of every rank's share crossing the machine's link.
#include <algorithm>
#include <cstdint>

#include "dist/reduce_into.h"
#include "dist/tcp_group.h"

namespace engine::dist {

void ProcessGroupTCP::share_within_machine(char* data, int64_t count, DType dtype, bool source, Deadline d) {
  if (!shm_ || count == 0) return;  // alone on this machine, or nothing to share (the same on every local rank)
  if (!source) fill_additive_identity(data, count, dtype);
  // Every rank's data final (the source's, the zeros) before any rank reads them: DDP's
  // buckets live in shared memory, reduced in place.
  shm_->barrier(d);
  shm_->all_reduce(data, count, dtype, ReduceOp::Sum, d);
}

void ProcessGroupTCP::hierarchical_all_reduce(char* data, int64_t count, DType dtype, ReduceOp op,
                                              const MessageHeader& desc, Deadline d) {
  const ReduceOp combine = op == ReduceOp::Avg ? ReduceOp::Sum : op;  // Avg divides once, at the end
  const bool leader = rank_ == local_ranks_[0];
  if (shm_) shm_->all_reduce(data, count, dtype, combine, d);  // 1. within the machine
  if (leader && leaders_.size() > 1) {                         // 2. between machines
    const int pos = int(std::find(leaders_.begin(), leaders_.end(), rank_) - leaders_.begin());
    ring_all_reduce(Ring{leaders_, pos}, data, count, dtype, combine, desc, d);
  }
  share_within_machine(data, count, dtype, leader, d);            // 3. the leader's result to the machine's other ranks
  if (op == ReduceOp::Avg) divide_by(data, count, dtype, size_);  // 4.
}

}  // namespace engine::dist
