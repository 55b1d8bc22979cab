// The reduction at the heart of the shared-memory collectives: n elements from each rank's
// memory, combined in rank order, written to one or more places.
//
//   reduce_ranks(DType::Float32, {rank0, rank1, rank2}, {out}, n, ReduceOp::Avg);
//   // out[i] = ((rank0[i] + rank1[i]) + rank2[i]) / 3, the same bits whichever rank computes it
//
// Always in rank order, so whichever rank computes an element gets the same bits; 16-bit
// types accumulate in float32 and round once. An output may be one of the inputs.
#pragma once

#include <cstdint>
#include <vector>

#include "dist/process_group.h"
#include "tensor/tensor.h"

namespace engine::dist {

void reduce_ranks(DType dtype, const std::vector<const char*>& in, const std::vector<char*>& out, int64_t n,
                  ReduceOp op);

}  // namespace engine::dist
