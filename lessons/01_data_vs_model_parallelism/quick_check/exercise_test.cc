// Lesson 1's quick check: the ranks' rows cover the batch once, in order, evenly.
#include "lessons/01_data_vs_model_parallelism/quick_check/exercise.h"
#include "catch2/catch.hpp"

using lesson1::my_rows;

TEST_CASE("the example in the header") {
  const lesson1::Rows r = my_rows(10, 4, 1);
  CHECK(r.first == 3);
  CHECK(r.count == 3);
}

TEST_CASE("every row goes to exactly one rank, in rank order, sizes within one") {
  for (int64_t batch = 0; batch <= 40; ++batch)
    for (int world = 1; world <= 8; ++world) {
      INFO("batch " << batch << ", world " << world);
      int64_t next = 0, smallest = batch, largest = 0;
      for (int rank = 0; rank < world; ++rank) {
        const lesson1::Rows r = my_rows(batch, world, rank);
        INFO("rank " << rank << " got first " << r.first << ", count " << r.count);
        REQUIRE(r.first == next);  // contiguous, no gap, no overlap
        REQUIRE(r.count >= 0);
        next += r.count;
        smallest = std::min(smallest, r.count);
        largest = std::max(largest, r.count);
      }
      REQUIRE(next == batch);  // the whole batch, once
      REQUIRE(largest - smallest <= 1);
    }
}
