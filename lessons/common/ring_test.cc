// The course's hand-written ring (ring.cc) follows the library's schedule
// (dist/ring_schedule.h) step for step, and sums correctly.
#include "catch2/catch.hpp"

#include "dist/ring_schedule.h"
#include "lessons/common/ring.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"

using namespace engine;

TEST_CASE("the lesson's ring sends and receives the segments dist/ring_schedule.h names") {
  for (int n = 2; n <= 5; ++n) {
    testing::run_threads(n, [n](dist::ProcessGroupTCP& g) {
      const int r = g.rank();
      Tensor t = full({int64_t(3 * n + 1)}, double(r + 1));
      lessons::RingLog log;
      lessons::ring_all_reduce(g, t, &log);
      REQUIRE(log.steps.size() == size_t(2 * (n - 1)));
      const int owned = dist::ring::owned_after_reduce_scatter(r, n);
      for (int s = 0; s < n - 1; ++s) {
        const auto rs = dist::ring::reduce_scatter_step(r, n, s);
        const auto ag = dist::ring::all_gather_step(owned, n, s);
        const lessons::RingStep& a = log.steps[size_t(s)];
        const lessons::RingStep& b = log.steps[size_t(n - 1 + s)];
        INFO("world " << n << ", rank " << r << ", step " << s);
        CHECK(a.phase == "reduce-scatter");
        CHECK((a.sent_chunk == rs.send && a.received_chunk == rs.recv));
        CHECK(b.phase == "all-gather");
        CHECK((b.sent_chunk == ag.send && b.received_chunk == ag.recv));
      }
      const double want = n * (n + 1) / 2.0;  // 1 + 2 + ... + n
      CHECK(max(abs(t - want)).item() == 0);
    });
  }
}
