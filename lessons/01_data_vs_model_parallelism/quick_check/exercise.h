// Lesson 1's quick check: split a batch between the ranks of a data-parallel job.
//
//   Rows r = my_rows(/*batch=*/10, /*world=*/4, /*rank=*/1);   // r.first == 3, r.count == 3
//
// Every row goes to exactly one rank, each rank's rows are contiguous and in rank order,
// and the sizes differ by at most one (the first batch % world ranks take one extra row).
#pragma once

#include <cstdint>

namespace lesson1 {

struct Rows {
  int64_t first = 0, count = 0;
};

Rows my_rows(int64_t batch, int world, int rank);

}  // namespace lesson1
