// ShardedGradScaler: loss scaling (nn/grad_scaler.h) for an optimizer over shards (FSDP's
// fsdp.parameters()), as PyTorch's torch.distributed.fsdp.sharded_grad_scaler.
//
// A float16 overflow usually hits a few elements of one layer, so after the reduce-scatter
// the Inf lies in one rank's shard only. A plain GradScaler on each rank would then skip
// the step on that rank and take it on the others: half the model stepped, and the ranks'
// scales apart from then on, so every later gradient averaged losses scaled differently.
// This one takes an all-reduce (MAX) of "found Inf or NaN" in unscale_(), so every rank
// skips the same steps and keeps the same scale.
//
//   dist::FullyShardedDataParallel fsdp(model);
//   nn::SGD opt(fsdp.parameters(), {.lr = 0.1});
//   dist::ShardedGradScaler scaler;
//   { nn::Autocast ac(DType::Float16); loss = cross_entropy(fsdp(x), y); }
//   scaler.scale(loss).backward();
//   scaler.step(opt);   // every rank steps, or none
//   scaler.update();
#pragma once

#include "dist/process_group.h"
#include "nn/grad_scaler.h"

namespace engine::dist {

class ShardedGradScaler : public nn::GradScaler {
 public:
  // group: the ranks that share the model (nullptr: the default group).
  explicit ShardedGradScaler(nn::GradScalerOptions options = {}, ProcessGroup* group = nullptr);

 protected:
  bool found_inf_anywhere(bool found_here) override;

 private:
  ProcessGroup* group_;
};

}  // namespace engine::dist
