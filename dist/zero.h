// ZeroRedundancyOptimizer: ZeRO stage 1 (lesson 3). Each rank keeps optimizer state only
// for its 1/N shard of the parameters, so that state — twice the model's size for Adam —
// is split across the ranks instead of copied on each.
//
//   ZeroRedundancyOptimizer opt(model->parameters(), ZeroOptimizer::Adam, {.adam = {.lr = 1e-3}});
//   loss.backward();   // plain backward: no DDP, the optimizer does the communication
//   opt.step();       // or, in float16, scaler.step(opt) with an nn::GradScaler
//
//   // PyTorch's pairing: ZeroRedundancyOptimizer over a DDP model.
//   DistributedDataParallel ddp(model);
//   ZeroRedundancyOptimizer opt(ddp.parameters(), ZeroOptimizer::Adam,
//                               {.adam = {.lr = 1e-3}, .ddp_averages_gradients = true});
//   dist::Join join(ddp, {&opt});   // uneven inputs (join.h): a finished rank still steps its shard
//
// step(): the gradients, flattened into one vector, are reduce-scattered (averaged), so
// rank r receives the average of shard r only (or, under DDP, rank r takes shard r of the
// already averaged gradient); rank r updates shard r with its optimizer;
// the updated shards are all-gathered back into every rank's parameters. The result equals
// DDP with an unsharded optimizer.
//
// Gradient clipping: in the reduce-scatter design a rank's .grad holds its own gradient,
// not the average, so nn::clip_grad_norm_ over the model would clip each rank by its own
// norm (and is refused there); opt.clip_grad_norm_(max_norm) between backward and step
// clips by the norm of the averaged gradient, as DDP with nn::clip_grad_norm_ does.
//
// consolidate_state_dict() gathers the full optimizer
// state on rank 0 in the unsharded optimizer's layout (for checkpoints); load_state_dict()
// takes such a state and keeps this rank's shard.
#pragma once

#include <memory>
#include <optional>
#include <vector>

#include "dist/joinable.h"
#include "dist/process_group.h"
#include "nn/adam.h"
#include "nn/sgd.h"
#include "nn/steppable.h"

namespace engine::dist {

enum class ZeroOptimizer { SGD, Adam };

struct ZeroOptions {
  nn::SGDOptions sgd;
  nn::AdamOptions adam;
  ProcessGroup* group = nullptr;  // nullptr: the default group
  // false (the reduce-scatter design, as DeepSpeed's ZeRO and FSDP): a plain model; step()
  // reduce-scatters the gradients itself. true (PyTorch's pairing): the model is wrapped in
  // DDP, whose backward has all-reduced the gradients already; step() cuts its shard out of
  // the local gradient. Same result; the reduce-scatter design sends 2(n-1)/n of the
  // parameters' bytes per step, PyTorch's pairing 3(n-1)/n (DDP's all-reduce, then the shards).
  bool ddp_averages_gradients = false;
};

class ZeroRedundancyOptimizer : public Joinable, public nn::Steppable {
 public:
  ZeroRedundancyOptimizer(std::vector<nn::Variable> params, ZeroOptimizer kind, ZeroOptions options = {});
  ~ZeroRedundancyOptimizer() override;  // the parameters may be given to another optimizer again
  void step() override;
  void zero_grad();
  // The learning rate, for a schedule that changes it between steps (as PyTorch's
  // schedulers change a ZeroRedundancyOptimizer's param_groups). Every rank sets the same.
  double lr() { return inner_->lr(); }
  void set_lr(double lr) { inner_->set_lr(lr); }
  // Between backward() and step(), as torch.nn.utils.clip_grad_norm_ under DDP: scales the
  // averaged gradient by max_norm / (norm + 1e-6) when its norm exceeds max_norm, and
  // returns that norm (of order norm_type, inf for the largest |g|). The reduce-scatter
  // design reduces its shard here (step() then uses it) and adds the shards' parts of the
  // norm over the ranks: a collective, which every rank calls.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0, bool error_if_nonfinite = false);
  // For a GradScaler (scaler.step(opt)): the parameters it unscales, and whether any rank
  // found an Inf or NaN. In the reduce-scatter design each rank has checked only its own
  // gradient, so they are asked (an all-reduce of one number); with DDP the averaged
  // gradients are the same everywhere.
  const std::vector<nn::Variable>& params() const override { return params_; }
  bool found_inf_in_step(bool found_here) override;
  // Bytes of optimizer state this rank holds (what sharding divides by N).
  size_t state_bytes() const;
  // Collective: the full state, in the unsharded optimizer's keys, on rank `to` (empty
  // elsewhere).
  nn::StateDict consolidate_state_dict(int to = 0);
  // Takes a full (consolidated) state and keeps this rank's shard. Every rank calls it.
  void load_state_dict(const nn::StateDict& full);

  // Under a Join (join.h), a rank out of data still steps its shard with the others'
  // averaged gradients and all-gathers the shards with them, as PyTorch's ZeRO join hook.
  // Once a rank has finished, each step also broadcasts, from the highest rank still
  // training, the learning rate and whether and how that step clipped (one small
  // broadcast, at the step's first clip_grad_norm_ or step()), so the shadow step follows
  // a schedule and clips as the others do. (PyTorch's shadow step keeps the finished
  // rank's own learning rate: its shard stops following the schedule.) Steps taken
  // through a GradScaler cannot be shadowed (the finished rank's gradient is still
  // multiplied by a scale it does not know): refused.
  void join_shadow_step() override;
  const ProcessGroup* join_process_group() const override { return group_; }
  void join_step_begins(int training, int highest_training) override;
  // Over DDP (PyTorch's pairing), nn::clip_grad_norm_ and clip_grad_value_ are refused
  // while the Join lives: a finished rank repeats the others' step without running the
  // training loop, so it would step its shard with the gradient unclipped. Clip with
  // opt.clip_grad_norm_, which it repeats.
  void join_begins() override;
  void join_ends() override;

 private:
  Tensor flatten_grads() const;
  Tensor averaged_grad_shard() const;
  void restore_frozen();
  std::vector<nn::Variable> params_;
  ZeroOptimizer kind_;
  ZeroOptions options_;
  ProcessGroup* group_;
  int64_t total_ = 0, shard_ = 0;  // elements in all parameters; per-rank shard (padded)
  nn::Variable shard_param_;       // this rank's slice of the flattened parameters
  Tensor clipped_shard_;           // averaged and clipped by clip_grad_norm_, for the next step()
  struct Clip {
    double max_norm, norm_type;
    bool error_if_nonfinite;
  };
  std::optional<Clip> join_settings(std::optional<Clip> mine);
  int join_root_ = -1;  // under a Join with a rank finished: the rank this step's settings come from
  void mark_parameters(const std::string& why);  // "" unmarks
  bool marked_ = false;                          // the parameters refuse nn's clipping and other optimizers
  bool scaled_ = false;                          // stepped through a GradScaler
  std::unique_ptr<nn::Optimizer> inner_;
};

}  // namespace engine::dist
