// The data lesson 3's batch-norm steps share: a global batch of 8 rows and 3 features, the
// same on every rank, whose halves differ on purpose (as two ranks' slices of a real batch
// can, when examples are ordered or the per-rank batch is tiny).
//
//   const Tensor x = lesson3::global_batch();          // (8, 3)
//   const Tensor mine = x.narrow(0, rank * 4, 4);      // rank r's half on 2 ranks
#pragma once

#include "tensor/ops.h"
#include "tensor/random.h"

namespace lesson3 {

inline engine::Tensor global_batch() {
  engine::Generator g(3);
  engine::Tensor x = engine::randn({8, 3}, &g);
  // Rows 4..7 (rank 1's half on 2 ranks) are shifted by +2 and scaled by 3.
  engine::Tensor tail = x.narrow(0, 4, 4);
  tail.copy_(tail * 3.0 + 2.0);
  return x;
}

}  // namespace lesson3
