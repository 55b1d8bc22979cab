// FSDP's unit, shared by the wrapper (fsdp.cc) and its state and clipping (fsdp_state.cc);
// not part of the public API. One unit is a child module whose parameters are views of one
// flat buffer; a rank keeps its shard of that buffer and gathers the rest when needed.
//
//   for (auto& u : units_) if (u->fresh) ... u->full ... u->flat_shard ...
#pragma once

#include <string>
#include <vector>

#include "dist/fsdp.h"

namespace engine::dist {

// One unit: its parameters as views of one flat buffer, and this rank's shard of it.
struct FullyShardedDataParallel::Unit {
  std::string name;  // the child's name ("0", "2"), or "" for the model's own parameters
  std::vector<nn::Variable> params;
  std::vector<std::string> names;  // by the model's names
  std::vector<int64_t> offsets;    // of each parameter in the flat buffer
  int64_t padded = 0, shard = 0;   // the flat buffer's length (a multiple of the shard group's size); a shard's
  Tensor full;                     // the flat buffer (its memory released while not needed)
  nn::Variable flat_shard;         // this rank's shard: what the optimizer updates
  bool fresh = false;              // full holds the current shards' values
  bool gathering = false;          // an all-gather into `full` is in flight
  Work gather_work;
  int ready = 0;             // parameters whose gradient is complete in this backward
  bool reduced = false;      // its gradients reduced in this backward
  bool ran_forward = false;  // in this step
  bool frozen = false;       // every parameter has requires_grad false: gathered, never reduced
  Tensor flat_grad;          // this backward's unsharded gradients (the parameters' grad destination)
};

}  // namespace engine::dist
