#include "dist/sharded_grad_scaler.h"

#include "dist/dist.h"

namespace engine::dist {

ShardedGradScaler::ShardedGradScaler(nn::GradScalerOptions options, ProcessGroup* group)
    : nn::GradScaler(options), group_(group ? group : &default_group()) {}

// Collective: called once per optimizer in unscale_(), on every rank in the same order.
bool ShardedGradScaler::found_inf_anywhere(bool found_here) {
  Tensor flag = from_vector(std::vector<int64_t>{found_here ? 1 : 0});
  group_->all_reduce(flag, ReduceOp::Max).wait();
  return flag.to_vector<int64_t>()[0] != 0;
}

}  // namespace engine::dist
