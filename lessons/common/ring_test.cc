// The course's hand-written ring (ring.cc) follows the library's schedule
// (dist/ring_schedule.h) step for step, and sums correctly.
#include <sstream>

#include "catch2/catch.hpp"
#include "dist/ring_schedule.h"
#include "lessons/common/ring.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"

using namespace engine;

TEST_CASE("the lesson's ring sends and receives the segments dist/ring_schedule.h names") {
  for (int n = 2; n <= 5; ++n) {
    // Each rank writes what differs into its own slot; Catch checks on this thread only.
    std::vector<std::string> problems(static_cast<size_t>(n), std::string());
    testing::run_threads(n, [n, &problems](dist::ProcessGroupTCP& g) {
      const int r = g.rank();
      std::ostringstream why;
      Tensor t = full({int64_t(3 * n + 1)}, double(r + 1));
      lessons::RingLog log;
      lessons::ring_all_reduce(g, t, &log);
      if (log.steps.size() != size_t(2 * (n - 1))) why << "logged " << log.steps.size() << " steps; ";
      const int owned = dist::ring::owned_after_reduce_scatter(r, n);
      for (int s = 0; s < n - 1 && log.steps.size() == size_t(2 * (n - 1)); ++s) {
        const auto rs = dist::ring::reduce_scatter_step(r, n, s);
        const auto ag = dist::ring::all_gather_step(owned, n, s);
        const lessons::RingStep& a = log.steps[size_t(s)];
        const lessons::RingStep& b = log.steps[size_t(n - 1 + s)];
        if (a.phase != "reduce-scatter" || a.sent_chunk != rs.send || a.received_chunk != rs.recv)
          why << "reduce-scatter step " << s << ": sent " << a.sent_chunk << " received " << a.received_chunk
              << ", schedule says " << rs.send << " and " << rs.recv << "; ";
        if (b.phase != "all-gather" || b.sent_chunk != ag.send || b.received_chunk != ag.recv)
          why << "all-gather step " << s << ": sent " << b.sent_chunk << " received " << b.received_chunk
              << ", schedule says " << ag.send << " and " << ag.recv << "; ";
      }
      const double want = n * (n + 1) / 2.0;  // 1 + 2 + ... + n
      if (max(abs(t - want)).item() != 0) why << "the sum is wrong; ";
      problems[size_t(r)] = why.str();
    });
    for (int r = 0; r < n; ++r) {
      INFO("world " << n << ", rank " << r);
      CHECK(problems[size_t(r)] == "");
    }
  }
}
