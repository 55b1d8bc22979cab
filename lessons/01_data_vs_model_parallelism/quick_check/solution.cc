// One answer to lesson 1's quick check.
#include "lessons/01_data_vs_model_parallelism/quick_check/exercise.h"

#include <algorithm>

namespace lesson1 {

Rows my_rows(int64_t batch, int world, int rank) {
  // batch = q * world + extra: every rank takes q rows, and ranks 0 .. extra-1 one more.
  const int64_t q = batch / world, extra = batch % world;
  return {rank * q + std::min<int64_t>(rank, extra), q + (rank < extra ? 1 : 0)};
}

}  // namespace lesson1
