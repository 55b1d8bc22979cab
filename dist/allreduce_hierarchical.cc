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
#include <type_traits>

#include "dist/reduce_into.h"
#include "dist/tcp_group.h"

namespace engine::dist {

namespace {

// Fills data with the value that leaves any x unchanged under op: x op identity = x.
// The floating types (bfloat16 and float16 too) have infinities; int64 has its extremes.
template <class T>
void fill_identity(T* data, int64_t count, ReduceOp op) {
  constexpr bool kFloat = !std::is_same_v<T, int64_t>;
  T v = T(0);  // Sum (and Avg, which sums first)
  if (op == ReduceOp::Product) v = T(1);
  if constexpr (kFloat) {
    if (op == ReduceOp::Max) v = T(-std::numeric_limits<float>::infinity());
    if (op == ReduceOp::Min) v = T(std::numeric_limits<float>::infinity());
  } else {
    if (op == ReduceOp::Max) v = std::numeric_limits<int64_t>::lowest();
    if (op == ReduceOp::Min) v = std::numeric_limits<int64_t>::max();
  }
  std::fill(data, data + count, v);
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
    if (!leader)
      dispatch_storage(dtype,
                       [&](auto zero) { fill_identity(reinterpret_cast<decltype(zero)*>(data), count, combine); });
    // Every rank's data final (the leader's ring done, the identities written) before any
    // rank reads them: DDP's buckets live in shared memory, reduced in place.
    shm_->barrier(d);
    shm_->all_reduce(data, count, dtype, combine, d);
  }
  if (op == ReduceOp::Avg) divide_by(data, count, dtype, size_);  // 4.
}

}  // namespace engine::dist
