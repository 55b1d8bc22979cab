// Ring all-reduce written with nothing but send and recv, for reading (the library's own
// is dist/allreduce_ring.cc). The tensor is cut into n chunks, one per rank; the ranks
// stand in a ring, each sending to the next and receiving from the previous.
//
//   RingLog log;
//   ring_all_reduce(group, t, &log);   // t now holds the sum over ranks, on every rank
//
// Reduce-scatter, steps s = 0 .. n-2: rank r sends chunk (r - s) mod n to rank r+1 and
// adds the chunk (r - s - 1) mod n it receives from rank r-1 into its own. Afterwards rank
// r holds the complete sum of chunk (r + 1) mod n.
// All-gather, steps s = 0 .. n-2: rank r sends chunk (r + 1 - s) mod n, complete, and
// copies the chunk (r - s) mod n it receives. Afterwards every rank holds every sum.
// Each rank sends 2 (n-1) chunks of S/n elements: 2 (n-1)/n S in all, whatever n is.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace lessons {

struct RingStep {
  std::string phase;  // "reduce-scatter" or "all-gather"
  int step = 0;       // 0-based within the phase
  int sent_chunk = -1, to = -1, received_chunk = -1, from = -1;
  std::vector<float> first_values;  // after the step: element 0 of each chunk of this rank's tensor
};

struct RingLog {
  std::vector<float> start;     // element 0 of each chunk before the first step
  std::vector<RingStep> steps;  // 2 (n-1) of them
  int64_t bytes_sent = 0;
};

// Sums `t` (float32, contiguous, at least one element per rank) over the group's ranks,
// in place. Every rank must call it with a tensor of the same size.
void ring_all_reduce(engine::dist::ProcessGroup& group, engine::Tensor& t, RingLog* log = nullptr);

// [first, first + count) of chunk c when n elements are cut into `parts` chunks.
std::pair<int64_t, int64_t> chunk_range(int64_t n, int parts, int c);

// The all-reduce by hand that does not scale: every rank sends its tensor to rank 0, which
// adds them up and sends the sum back. Rank 0 moves (n-1) S in and (n-1) S out.
// Returns the bytes this rank sent; *received (if given) gets the bytes it received.
int64_t naive_all_reduce(engine::dist::ProcessGroup& group, engine::Tensor& t, int64_t* received = nullptr);

}  // namespace lessons
