// broadcast_state_dict: one rank's StateDict (names, dtypes, shapes and values) copied to
// every rank of a group, whatever each rank held before: keys it lacks are made, keys the
// root lacks are dropped. A Join (join.h) gives every rank the optimizer and loss-scaler
// state of the rank that took every step with it.
//
//   nn::StateDict s = opt.state_dict();           // on every rank
//   dist::broadcast_state_dict(group, &s, 1);      // now rank 1's on every rank (on the CPU)
//   opt.load_state_dict(s);
//
// A collective: every rank of the group calls it, with the same root. Three broadcasts:
// the header's length, the header (each key's name, dtype and shape), then the values of
// all tensors packed into one buffer.
//
// broadcast_doubles: a few numbers from `root`, exactly (as the bits of each double; a
// float32 tensor would round them). Every rank passes as many.
//
//   opt.set_lr(dist::broadcast_doubles(group, {opt.lr()}, root)[0]);
#pragma once

#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace engine::dist {

void broadcast_state_dict(ProcessGroup& group, nn::StateDict* state, int root);
std::vector<double> broadcast_doubles(ProcessGroup& group, const std::vector<double>& values, int root);

}  // namespace engine::dist
