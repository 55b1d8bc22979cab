// Lesson 5's quick check: the ring all-reduce on paper. All ranks live in one process here,
// so the algorithm is all there is: no sockets, no threads.
//
//   std::vector<std::vector<float>> data = {{1, 2}, {10, 20}};   // rank 0's and rank 1's
//   ring_all_reduce(data, [](const Message& m) { /* m.step, m.from, m.to, m.chunk */ });
//   // data == {{11, 22}, {11, 22}}
//
// Each rank's vector is cut into n chunks (n = data.size(); the length is a multiple of n).
// Messages go round a ring, rank r to rank r+1 (mod n), in lockstep steps: at each step
// every rank sends one chunk, and what it receives is applied after all sends of that step
// (a rank never receives something sent in the same step it is still computing).
//   reduce-scatter, n-1 steps: the receiver adds the chunk into its own copy;
//   all-gather, n-1 steps:     the receiver overwrites its copy with the finished chunk.
// Call on_send once for every message, at the step it is sent (steps numbered from 0 to
// 2(n-1)-1), so the test can count what travels: 2(n-1) messages per rank, each S/n floats.
#pragma once

#include <functional>
#include <vector>

namespace lesson5 {

struct Message {
  int step = 0, from = 0, to = 0, chunk = 0;  // chunk: which of the n pieces, in [0, n)
};

void ring_all_reduce(std::vector<std::vector<float>>& data, const std::function<void(const Message&)>& on_send);

}  // namespace lesson5
