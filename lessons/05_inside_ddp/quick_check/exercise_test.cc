// Lesson 5's quick check: the ring all-reduce leaves every rank with the sum, and moves what
// the ring moves: each step, every rank sends one chunk to its right-hand neighbour; 2(n-1)
// messages of S/n floats per rank in all.
#include <vector>

#include "catch2/catch.hpp"
#include "lessons/05_inside_ddp/quick_check/exercise.h"

using lesson5::Message;

TEST_CASE("every rank ends with the sum, moved round the ring in 2(n-1) steps") {
  for (int n : {1, 2, 3, 4, 5}) {
    for (int per_chunk : {1, 3}) {
      INFO("world size " << n << ", " << per_chunk << " floats per chunk");
      const int len = n * per_chunk;
      // Rank r holds (r + 1) * (1, 2, ..., S): the sum is n(n+1)/2 * (1, ..., S).
      std::vector<std::vector<float>> data(static_cast<size_t>(n));
      for (int r = 0; r < n; ++r)
        for (int i = 0; i < len; ++i) data[size_t(r)].push_back(float((r + 1) * (i + 1)));
      std::vector<Message> sent;
      lesson5::ring_all_reduce(data, [&](const Message& m) { sent.push_back(m); });

      for (int r = 0; r < n; ++r)
        for (int i = 0; i < len; ++i) {
          INFO("rank " << r << ", element " << i);
          CHECK(data[size_t(r)][size_t(i)] == float(n * (n + 1) / 2 * (i + 1)));
        }
      // What travelled: n ranks x 2(n-1) messages; at each step every rank sends exactly once,
      // to r+1, a chunk index in [0, n).
      REQUIRE(sent.size() == size_t(n * 2 * (n - 1)));
      std::vector<std::vector<int>> sends_at(size_t(2 * std::max(n - 1, 0)), std::vector<int>(size_t(n), 0));
      for (const Message& m : sent) {
        INFO("message at step " << m.step << " from rank " << m.from << " to " << m.to << ", chunk " << m.chunk);
        REQUIRE((m.step >= 0 && m.step < 2 * (n - 1)));
        REQUIRE((m.from >= 0 && m.from < n));
        CHECK(m.to == (m.from + 1) % n);
        CHECK((m.chunk >= 0 && m.chunk < n));
        ++sends_at[size_t(m.step)][size_t(m.from)];
      }
      for (size_t s = 0; s < sends_at.size(); ++s)
        for (int r = 0; r < n; ++r) {
          INFO("step " << s << ", rank " << r);
          CHECK(sends_at[s][size_t(r)] == 1);
        }
    }
  }
}
