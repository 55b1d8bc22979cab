// The ring all-reduce: bandwidth-optimal on any number of ranks.
//
// Arrange the ranks in a ring (rank r sends to r+1 and receives from r-1) and cut the data
// into one segment per rank. Then:
//
//   reduce-scatter, n-1 steps: in step s, rank r sends segment r-s to the next rank and
//     receives segment r-s-1 from the previous one, adding it into its own copy. Each
//     segment travels once around the ring collecting every rank's contribution; after
//     the last step rank r holds segment r+1 fully reduced.
//   all-gather, n-1 steps: each rank passes its finished segment on, and forwards what it
//     receives, until every rank has every finished segment.
//
// Each rank sends 2(n-1)/n of the data in total, whatever n is: no rank is a bottleneck,
// which is why all_reduce time stays nearly flat as ranks are added (nccl-tests' "bus
// bandwidth" busbw = algbw * 2(n-1)/n measures exactly this). Every element is reduced
// once, by one rank, and then copied, so all ranks end with the same bits.
//
// Within a step, sending, receiving and reducing overlap: the received bytes are reduced
// in chunks (TCPGroupOptions::chunk_bytes) while the rest are still arriving.
#include <cstring>
#include <vector>

#include "dist/reduce_into.h"
#include "dist/ring_schedule.h"
#include "dist/tcp_group.h"

namespace engine::dist {

ProcessGroupTCP::Ring ProcessGroupTCP::full_ring() const {
  Ring ring{std::vector<int>(size_t(size_)), rank_};
  for (int r = 0; r < size_; ++r) ring.ranks[size_t(r)] = r;
  return ring;
}

void ProcessGroupTCP::ring_reduce_scatter(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype,
                                          ReduceOp op, const MessageHeader& desc, int shift, Deadline d) {
  const int n = ring.size(), next = ring.next(), prev = ring.prev();
  const size_t es = dtype_size(dtype);
  int64_t largest = 0;
  for (int k = 0; k < n; ++k) largest = std::max(largest, bounds[k + 1] - bounds[k]);
  thread_local std::vector<char> scratch;
  scratch.resize(size_t(largest) * es);
  for (int step = 0; step < n - 1; ++step) {
    const auto [send_seg, recv_seg] = ring::reduce_scatter_step(ring.pos, n, step, shift);
    MessageHeader out = desc, expect = desc;
    out.step = expect.step = uint16_t(step);
    out.bytes = size_t(bounds[send_seg + 1] - bounds[send_seg]) * es;
    expect.bytes = size_t(bounds[recv_seg + 1] - bounds[recv_seg]) * es;
    char* acc = data + size_t(bounds[recv_seg]) * es;
    int64_t reduced = 0;  // elements of the received segment already added in
    auto reduce_arrived = [&](size_t bytes) {
      const int64_t ready = int64_t(bytes / es);
      reduce_into(acc + size_t(reduced) * es, scratch.data() + size_t(reduced) * es, ready - reduced, dtype, op);
      reduced = ready;
    };
    send_recv({next, out, data + size_t(bounds[send_seg]) * es}, {prev, expect, scratch.data(), reduce_arrived}, d);
  }
}

void ProcessGroupTCP::ring_all_gather(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype,
                                      const MessageHeader& desc, int owned_shift, Deadline d) {
  // Position p starts owning segment p + 1 + owned_shift and passes segments along the ring.
  const int n = ring.size(), next = ring.next(), prev = ring.prev();
  const size_t es = dtype_size(dtype);
  const int owned = ring::owned_after_reduce_scatter(ring.pos, n, owned_shift);
  for (int step = 0; step < n - 1; ++step) {
    const auto [send_seg, recv_seg] = ring::all_gather_step(owned, n, step);
    MessageHeader out = desc, expect = desc;
    out.step = expect.step = uint16_t(n - 1 + step);  // continues the reduce-scatter's step numbers
    out.bytes = size_t(bounds[send_seg + 1] - bounds[send_seg]) * es;
    expect.bytes = size_t(bounds[recv_seg + 1] - bounds[recv_seg]) * es;
    send_recv({next, out, data + size_t(bounds[send_seg]) * es}, {prev, expect, data + size_t(bounds[recv_seg]) * es},
              d);
  }
}

void ProcessGroupTCP::ring_all_reduce(const Ring& ring, char* data, int64_t count, DType dtype, ReduceOp op,
                                      const MessageHeader& desc, Deadline d) {
  const int n = ring.size();
  if (n == 1) return;
  const std::vector<int64_t> bounds = ring::equal_segments(count, n);
  ring_reduce_scatter(ring, data, bounds, dtype, op, desc, 0, d);
  if (op == ReduceOp::Avg) {  // the owner divides its finished segment once
    const int owned = ring::owned_after_reduce_scatter(ring.pos, n);
    divide_by(data + size_t(bounds[owned]) * dtype_size(dtype), bounds[owned + 1] - bounds[owned], dtype, n);
  }
  ring_all_gather(ring, data, bounds, dtype, desc, 0, d);
}

void ProcessGroupTCP::run_all_reduce(const Tensor& t, ReduceOp op, const MessageHeader& desc, Deadline d) {
  switch (algorithm_) {
    case AllReduceAlgorithm::SharedMemory:  // every rank on this machine: no sockets (shm_allreduce.h)
      shm_->all_reduce(t.bytes(), t.numel(), t.dtype(), op, d);
      return;
    case AllReduceAlgorithm::Ring: ring_all_reduce(full_ring(), t.bytes(), t.numel(), t.dtype(), op, desc, d); return;
    case AllReduceAlgorithm::Hierarchical:
      hierarchical_all_reduce(t.bytes(), t.numel(), t.dtype(), op, desc, d);
      return;
  }
}

}  // namespace engine::dist
