// Inside DDP, step 4: all-reduce by hand, twice, with send and recv only (lessons/common/ring.h).
//  - naive: everyone sends to rank 0, which adds and sends the sum back. Rank 0 moves
//    (n-1) S bytes in and (n-1) S out: its link is the bottleneck, and it grows with n.
//  - ring: reduce-scatter then all-gather around a ring. Every rank sends 2 (n-1)/n S:
//    under 2 S whatever n is, and every link is busy at once.
//
//   bazel run //lessons/05_inside_ddp:04_allreduce_by_hand
#include <cstdio>

#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "lessons/common/ring.h"
#include "tensor/ops.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), n = dist::get_world_size();
  const int64_t elements = 60 * 1024;  // divisible by 2, 3, 4, 5, 6: equal chunks
  const int64_t S = elements * 4;      // bytes
  // Whole numbers, so every order of addition gives the same sum exactly.
  std::vector<float> v(static_cast<size_t>(elements));
  for (int64_t i = 0; i < elements; ++i) v[size_t(i)] = float(i % 7 + rank);
  const Tensor mine = from_vector(v);

  Tensor library = mine.clone(), naive = mine.clone(), ring = mine.clone();
  dist::all_reduce(library);
  int64_t naive_received = 0;
  const int64_t naive_sent = lessons::naive_all_reduce(dist::default_group(), naive, &naive_received);
  lessons::RingLog log;
  lessons::ring_all_reduce(dist::default_group(), ring, &log);

  std::printf("rank %d: naive == library: %s, ring == library: %s\n", rank,
              lessons::max_abs_diff(naive, library) == 0 ? "yes" : "NO",
              lessons::max_abs_diff(ring, library) == 0 ? "yes" : "NO");
  const int64_t naive_formula = rank == 0 ? (n - 1) * S : S;
  const int64_t ring_formula = 2 * (n - 1) * S / n;
  std::printf("rank %d: sent %lld bytes naive (formula %lld), %lld bytes ring (formula 2(n-1)/n S = %lld), S = %lld\n",
              rank, (long long)naive_sent, (long long)naive_formula, (long long)log.bytes_sent, (long long)ring_formula,
              (long long)S);
  lessons::report("naive_sent", double(naive_sent));
  lessons::report("naive_formula", double(naive_formula));
  lessons::report("ring_sent", double(log.bytes_sent));
  lessons::report("ring_formula", double(ring_formula));
  lessons::report("naive_received", double(naive_received));
  lessons::report("S", double(S));
  if (rank == 0)
    std::printf("rank 0: received %lld bytes naive (formula (n-1) S = %lld): it moves (n-1) S twice\n",
                (long long)naive_received, (long long)((n - 1) * S));
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "04_allreduce_by_hand: %s\n", e.what());
  return 1;
}
