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
#include <algorithm>
#include <cstring>
#include <functional>
#include <vector>

#include "dist/reduce_into.h"
#include "dist/ring_schedule.h"
#include "dist/tcp_group.h"

namespace engine::dist {

namespace {
// Elements in the largest of the segments that `bounds` delimits.
int64_t largest_segment(const std::vector<int64_t>& bounds) {
  int64_t largest = 0;
  for (size_t k = 0; k + 1 < bounds.size(); ++k) largest = std::max(largest, bounds[k + 1] - bounds[k]);
  return largest;
}
}  // namespace

ProcessGroupTCP::Ring ProcessGroupTCP::full_ring() const {
  Ring ring{std::vector<int>(size_t(size_)), rank_};
  for (int r = 0; r < size_; ++r) ring.ranks[size_t(r)] = r;
  return ring;
}

void ProcessGroupTCP::ring_reduce_scatter(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype,
                                          ReduceOp op, const MessageHeader& desc, int shift, Deadline d) {
  const size_t es = dtype_size(dtype);
  // Each segment is summed where it lies: sent from there, and received into there.
  const auto at = [&](int, int seg) { return data + size_t(bounds[size_t(seg)]) * es; };
  ring_reduce_scatter_steps(ring, data, bounds, dtype, op, desc, shift, d, at, at);
}

void ProcessGroupTCP::ring_reduce_scatter_into(const Ring& ring, const char* in, char* out,
                                               const std::vector<int64_t>& bounds, DType dtype, ReduceOp op,
                                               const MessageHeader& desc, int shift, Deadline d) {
  const int n = ring.size();
  const size_t es = dtype_size(dtype);
  if (n == 1) {  // nothing to add: the one segment is the result
    std::memmove(out, in, size_t(bounds[1] - bounds[0]) * es);
    return;
  }
  const int64_t largest = largest_segment(bounds);
  // Step s sums into one partial buffer while sending the other (step s-1's sums); the last
  // step sums into `out`. Two segments of memory (none on two ranks), not a copy of `in`.
  std::vector<char> partial[2];
  for (int b = 0; b < 2 && b < n - 2; ++b) partial[b].resize(size_t(largest) * es);
  const auto send_from = [&](int step, int seg) -> const char* {
    return step == 0 ? in + size_t(bounds[size_t(seg)]) * es : partial[(step - 1) % 2].data();
  };
  const auto sum_into = [&](int step, int) { return step == n - 2 ? out : partial[step % 2].data(); };
  ring_reduce_scatter_steps(ring, in, bounds, dtype, op, desc, shift, d, send_from, sum_into);
}

void ProcessGroupTCP::ring_reduce_scatter_steps(const Ring& ring, const char* in, const std::vector<int64_t>& bounds,
                                                DType dtype, ReduceOp op, const MessageHeader& desc, int shift,
                                                Deadline d, const std::function<const char*(int, int)>& send_from,
                                                const std::function<char*(int, int)>& sum_into) {
  const int n = ring.size(), next = ring.next(), prev = ring.prev();
  const size_t es = dtype_size(dtype);
  // Received bytes land in a window of at most options_.ring_window_bytes, reused as they
  // are added in.
  const int64_t largest = largest_segment(bounds);
  const size_t window = std::min(size_t(largest) * es, std::max<size_t>(options_.ring_window_bytes, 64) / es * es);
  thread_local std::vector<char> scratch;
  scratch.resize(std::max<size_t>(window, 1));
  for (int step = 0; step < n - 1; ++step) {
    const auto [send_seg, recv_seg] = ring::reduce_scatter_step(ring.pos, n, step, shift);
    MessageHeader out = desc, expect = desc;
    out.step = expect.step = uint16_t(step);
    out.bytes = size_t(bounds[size_t(send_seg) + 1] - bounds[size_t(send_seg)]) * es;
    expect.bytes = size_t(bounds[size_t(recv_seg) + 1] - bounds[size_t(recv_seg)]) * es;
    const char* mine = in + size_t(bounds[size_t(recv_seg)]) * es;  // this rank's own part of the segment
    const char* sending = send_from(step, send_seg);
    char* acc = sum_into(step, recv_seg);
    int64_t reduced = 0;  // elements of the received segment already added in
    auto reduce_arrived = [&](size_t bytes) {
      const int64_t ready = int64_t(bytes / es);
      while (reduced < ready) {  // in at most two pieces: the window may wrap around
        const size_t from = window ? size_t(reduced) * es % window : 0;
        const int64_t k = std::min(ready - reduced, int64_t((window - from) / es));
        char* to = acc + size_t(reduced) * es;
        if (to != mine + size_t(reduced) * es) std::memcpy(to, mine + size_t(reduced) * es, size_t(k) * es);
        reduce_into(to, scratch.data() + from, k, dtype, op);
        reduced += k;
      }
    };
    send_recv({next, out, sending}, {prev, expect, scratch.data(), reduce_arrived, window}, d);
  }
}

void ProcessGroupTCP::ring_all_gather(const Ring& ring, char* data, const std::vector<int64_t>& bounds, DType dtype,
                                      const MessageHeader& desc, int owned_shift, Deadline d) {
  std::vector<char*> segments(size_t(ring.size()));
  for (int k = 0; k < ring.size(); ++k) segments[size_t(k)] = data + size_t(bounds[size_t(k)]) * dtype_size(dtype);
  ring_all_gather(ring, segments, bounds, dtype, desc, owned_shift, d);
}

void ProcessGroupTCP::ring_all_gather(const Ring& ring, const std::vector<char*>& segments,
                                      const std::vector<int64_t>& bounds, DType dtype, const MessageHeader& desc,
                                      int owned_shift, Deadline d) {
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
    send_recv({next, out, segments[size_t(send_seg)]}, {prev, expect, segments[size_t(recv_seg)]}, d);
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
