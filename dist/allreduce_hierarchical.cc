// The hierarchical all-reduce: for a job on several machines with several ranks on each.
//
// Within a machine, shared memory is the fastest way to combine data (no kernel copies);
// between machines, the ring is bandwidth-optimal. So:
//
//   1. every machine reduces its ranks' data through shared memory: each local rank
//      holds its machine's partial result;
//   2. one leader per machine (its lowest rank) runs the TCP ring over the leaders on
//      that partial result: each leader holds the whole result;
//   3. each leader shares it back: a shared-memory all-reduce to which the others
//      contribute op's identity (0 for a sum, 1 for a product, -inf/+inf for max/min), so
//      every local rank ends with the leader's bits;
//   4. for Avg, every rank divides the same sum by the world size.
//
// Only the leaders touch the network: each sends 2(m-1)/m of the data for m machines,
// instead of every rank's share crossing the machine's link.
#include <algorithm>
#include <cstdint>
#include <limits>

#include "dist/tcp_group.h"

namespace engine::dist {

namespace {

// Fills data with the value that leaves any x unchanged under op: x op identity = x.
template <class T>
void fill_identity(T* data, int64_t count, ReduceOp op) {
  T v = 0;  // Sum (and Avg, which sums first)
  if (op == ReduceOp::Product) v = 1;
  if (op == ReduceOp::Max)
    v = std::numeric_limits<T>::has_infinity ? -std::numeric_limits<T>::infinity() : std::numeric_limits<T>::lowest();
  if (op == ReduceOp::Min)
    v = std::numeric_limits<T>::has_infinity ? std::numeric_limits<T>::infinity() : std::numeric_limits<T>::max();
  for (int64_t i = 0; i < count; ++i) data[i] = v;
}

}  // namespace

void ProcessGroupTCP::hierarchical_all_reduce(char* data, int64_t count, DType dtype, ReduceOp op,
                                              const MessageHeader& desc, Deadline d) {
  const ReduceOp combine = op == ReduceOp::Avg ? ReduceOp::Sum : op;  // Avg divides once, at the end
  const bool leader = rank_ == local_ranks_[0];
  if (shm_) shm_->all_reduce(data, count, dtype, combine, d);  // 1. within the machine
  if (leader && leaders_.size() > 1) {                         // 2. between machines
    const int pos = int(std::find(leaders_.begin(), leaders_.end(), rank_) - leaders_.begin());
    ring_all_reduce(Ring{leaders_, pos}, data, count, dtype, combine, desc, d);
  }
  if (shm_) {  // 3. the leader's result to the machine's other ranks
    if (!leader) {
      if (dtype == DType::Float32)
        fill_identity(reinterpret_cast<float*>(data), count, combine);
      else
        fill_identity(reinterpret_cast<int64_t*>(data), count, combine);
    }
    // Every rank's data final (the leader's ring done, the identities written) before any
    // rank reads them: DDP's buckets live in shared memory, reduced in place.
    shm_->barrier(d);
    shm_->all_reduce(data, count, dtype, combine, d);
  }
  if (op == ReduceOp::Avg) {  // 4.
    float* f = reinterpret_cast<float*>(data);
    for (int64_t i = 0; i < count; ++i) f[i] /= float(size_);
  }
}

}  // namespace engine::dist
