// The ring's schedule: which segment each rank sends and receives at each step. Every
// ring in the engine follows it: the CPU backend's (allreduce_ring.cc), the NCCL
// backend's teaching ring (nccl_group.cu), and the course's hand-written one
// (lessons/common/ring.cc, whose test checks it against this).
//
//   for (int s = 0; s < n - 1; ++s) {
//     const ring::Step st = ring::reduce_scatter_step(r, n, s);   // send st.send, add st.recv
//   }
//   const int owned = ring::owned_after_reduce_scatter(r, n);     // fully reduced here
//   for (int s = 0; s < n - 1; ++s) {
//     const ring::Step st = ring::all_gather_step(owned, n, s);   // send st.send, copy st.recv
//   }
//
// Position r sends to r+1 and receives from r-1 (mod n). In reduce-scatter step s it sends
// segment r-s and adds in segment r-s-1: each segment travels once around the ring
// collecting every contribution, and after n-1 steps position r holds segment r+1 fully
// reduced. In all-gather, each position passes on what it finished and forwards what it
// receives. `shift` moves which segment each position ends up owning (reduce_scatter
// wants rank r to own segment r: shift -1).
#pragma once

#include <cstdint>
#include <vector>

namespace engine::dist::ring {

struct Step {
  int send = 0, recv = 0;  // segment indices in [0, n)
};

inline int wrap(int a, int n) { return ((a % n) + n) % n; }

inline Step reduce_scatter_step(int r, int n, int s, int shift = 0) {
  return {wrap(r - s + shift, n), wrap(r - s - 1 + shift, n)};
}

inline int owned_after_reduce_scatter(int r, int n, int shift = 0) { return wrap(r + 1 + shift, n); }

inline Step all_gather_step(int owned, int n, int s) { return {wrap(owned - s, n), wrap(owned - s - 1, n)}; }

// Segments as equal as possible: segment k is elements [k*count/n, (k+1)*count/n).
inline std::vector<int64_t> equal_segments(int64_t count, int n) {
  std::vector<int64_t> bounds(size_t(n) + 1);
  for (int k = 0; k <= n; ++k) bounds[size_t(k)] = int64_t(k) * count / n;
  return bounds;
}

}  // namespace engine::dist::ring
