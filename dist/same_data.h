// Checks that every rank of a group reads the same dataset. A DistributedSampler gives each
// rank its slice of the indices 0..N-1, assuming that index i is the same sample on every
// rank; on several machines each reads its own copy of the files, and a copy that differs
// goes unseen: a few labels changed train on silently, and a shorter copy gives its ranks
// other slices, another number of steps per epoch and so another learning-rate schedule
// (DDP's replica check then finds the weights apart, without saying why).
//
//   require_same_data(dist::default_group(), train->inputs(), train->targets(),
//                     "[recap] the training set (FASHION_MNIST_DIR=/data/fmnist)");
//   // on a mismatch every rank throws, with its own count and fingerprint:
//   // "... differs between the ranks: rank 1 has 59000 samples, fingerprint 0x3c1e...; ..."
#pragma once

#include <cstdint>
#include <string>

#include "dist/process_group.h"
#include "tensor/tensor.h"

namespace engine::dist {

// A 64-bit hash of a tensor's bytes, chained from `h` (not a cryptographic hash: it tells
// apart copies that differ by accident; Fashion-MNIST's 188 MB in about 40 ms). DDP's
// replica check compares parameters with it.
uint64_t hash_bytes(const Tensor& t, uint64_t h);

// hash_bytes of its dtype and shape, then of its bytes.
uint64_t fingerprint(const Tensor& t);

// Collective: every rank of `group` calls it, with its dataset's inputs and targets. Throws
// on every rank, naming `what`, this rank's sample count and fingerprint, when they differ.
void require_same_data(ProcessGroup& group, const Tensor& inputs, const Tensor& targets, const std::string& what);

}  // namespace engine::dist
