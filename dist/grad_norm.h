// The norm of a gradient spread over ranks, for clipping where each rank holds a part
// (FSDP's shards, ZeRO's reduced shard): each rank's part of the norm (nn/clip_grad.h:
// sum |g|^p, or max |g| for the inf-norm) combined over the group.
//
//   const double part = nn::grad_norm_part(my_shard_params, norm_type);
//   const double total = dist::total_grad_norm(group, part, norm_type);
//   nn::scale_grads_to_norm_(my_shard_params, max_norm, total, norm_type, false);
#pragma once

#include "dist/process_group.h"

namespace engine::dist {

// A collective: every rank of `group` calls it with its part and gets the whole norm. A
// NaN part on any rank makes the norm NaN on every rank, whatever the reduction does with
// NaN, as one process's norm would be.
double total_grad_norm(ProcessGroup& group, double part, double norm_type);

}  // namespace engine::dist
