// FullyShardedDataParallel (ZeRO-3 / FSDP, with PyTorch's names): parameters, gradients
// and optimizer state sharded across ranks, each module's parameters gathered just in time.
//
//   dist::FullyShardedDataParallel fsdp(model, {.sharding_strategy = dist::ShardingStrategy::FULL_SHARD});
//   Adam opt(fsdp.parameters(), {.lr = 1e-3});   // the flat shards: 1/N of the parameters
//   cross_entropy(fsdp(x), y).backward();        // gathers, computes, reduce-scatters
//   opt.step();                                  // updates this rank's shards only
//   nn::StateDict full = fsdp.full_state_dict(); // on rank 0, by the model's own names
//
// Each child of the model that holds parameters is a unit (PyTorch's auto-wrap, one level);
// parameters of the model itself form a root unit. The model must run its children through
// children() (Sequential does): FSDP puts a wrapper in each child's place. A unit's parameters live in one flat
// buffer, padded to a multiple of the world size; rank r keeps shard r of it (a
// registered parameter, what the optimizer sees). Per strategy:
//   FULL_SHARD     before a unit's forward its shards are all-gathered into the flat
//                  buffer, and after it the buffer's memory is released; before its
//                  backward it is gathered again; once its gradients are complete they are
//                  reduce-scattered (averaged) into the shard's gradient and the buffer is
//                  released. Bytes per step: 3 (n-1)/n P (1.5 x DDP's all-reduce). The
//                  reduce-scatter runs while backward computes the next unit down.
//   SHARD_GRAD_OP  (ZeRO-2) the same, but the gathered parameters stay from forward to the
//                  end of backward (one all-gather per step): 2 (n-1)/n P, as DDP.
//   NO_SHARD       every rank holds everything; gradients all-reduced: DDP.
//   HYBRID_SHARD   FULL_SHARD within each machine (blocks of ranks_per_node consecutive
//                  ranks), and the shard gradients all-reduced between machines.
// A layer whose parameters are all frozen (requires_grad false, as when fine-tuning) is a
// frozen unit: gathered for its forward and backward like the others, never reduced, and its
// flat shard does not require grad, so an optimizer leaves it alone. A layer with frozen and
// trained parameters is refused (as PyTorch's FSDP without use_orig_params refuses it).
// With forward_prefetch, the next unit's all-gather starts while this one computes
// (backward: the previous unit's). Buffers (batch-norm statistics) are rank 0's at the
// start and then each rank's own, as DDP with broadcast_buffers=false.
// Loss scaling for float16: dist::ShardedGradScaler (sharded_grad_scaler.h), not
// nn::GradScaler, since each rank sees only its shard of the gradients.
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "dist/process_group.h"
#include "nn/module.h"

namespace engine::dist {

enum class ShardingStrategy { FULL_SHARD, SHARD_GRAD_OP, NO_SHARD, HYBRID_SHARD };
const char* sharding_strategy_name(ShardingStrategy s);

struct FSDPOptions {
  ShardingStrategy sharding_strategy = ShardingStrategy::FULL_SHARD;
  ProcessGroup* group = nullptr;  // nullptr: the default group
  // HYBRID_SHARD: how many consecutive ranks share a machine (0: the CPU backend's count of
  // ranks on this machine). Shards live within a machine; replicas across machines.
  int ranks_per_node = 0;
  bool forward_prefetch = true;
};

// What FSDP holds on this rank, in bytes (float32 parameters and gradients; the
// optimizer's state is the optimizer's: count it there).
struct FSDPMemory {
  size_t sharded_params = 0;   // the shards, always held
  size_t full_params_now = 0;  // unsharded parameters gathered at this moment
  size_t full_params_peak = 0;
  size_t grads_peak = 0;  // gradients (unsharded while a unit reduces them, then the shards)
};

class FullyShardedDataParallel : public nn::Module {
 public:
  explicit FullyShardedDataParallel(std::shared_ptr<nn::Module> model, FSDPOptions options = {});
  ~FullyShardedDataParallel() override;

  nn::Variable forward(const nn::Variable& x) override;
  nn::Module& module() { return *model_; }
  int units() const { return int(units_.size()); }

  // Collective: every parameter unsharded, by the model's names, plus the buffers, on rank
  // 0 (every rank when rank0_only is false; empty elsewhere). Copies, not views.
  nn::StateDict full_state_dict(bool rank0_only = true);
  // This rank's shards ("<unit>.flat_param", with "_shard.rank" and "_shard.count" saying
  // whose), and loading them back on the same rank of the same world size.
  nn::StateDict sharded_state_dict() const;
  void load_sharded_state_dict(const nn::StateDict& state);

  FSDPMemory memory() const { return memory_; }
  // Collective, between backward and the optimizer's step (PyTorch's
  // FullyShardedDataParallel.clip_grad_norm_): clips this rank's gradient shards by the
  // norm of the whole model's gradient. Each rank's part of the norm (nn/clip_grad.h) is
  // added up over the shards, so every rank scales by the coefficient nn::clip_grad_norm_
  // would take on the unsharded gradients. Returns that total norm.
  double clip_grad_norm_(double max_norm, double norm_type = 2.0);
  // The group the shards live in (the whole group, or HYBRID_SHARD's machine) and, for
  // HYBRID_SHARD, the group of the same shard on every machine (nullptr otherwise).
  ProcessGroup* shard_group() const { return shard_group_; }
  std::pair<int64_t, int64_t> shard_position() const;  // (this rank's shard, shards in all)
  ProcessGroup* replicate_group() const { return replica_.get(); }
  void reset_peak_memory();

  struct Unit;  // fsdp.cc
  // Called by the units (fsdp.cc), around the forward of unit k and before its backward.
  void before_forward(size_t k);
  void after_forward(size_t k, nn::Variable& out);
  void before_backward(size_t k);

 private:
  void build_units();
  void materialize(Unit& u);  // the unit's parameters, gathered and ready
  void start_gather(Unit& u);
  void drop_prefetches();
  void release(Unit& u);
  void on_grad_ready(size_t k);
  void reduce_gradients(Unit& u);
  void finish_reduce();
  void end_of_backward();
  bool reshards_after_forward() const;
  void add_full(long bytes);
  void add_grad(long bytes);

  std::shared_ptr<nn::Module> model_;
  FSDPOptions options_;
  ProcessGroup* group_;                    // every rank
  std::shared_ptr<ProcessGroup> shard_;    // where the shards live (HYBRID: this machine)
  std::shared_ptr<ProcessGroup> replica_;  // HYBRID: same shard on every machine
  ProcessGroup* shard_group_ = nullptr;    // shard_ or group_
  std::vector<std::unique_ptr<Unit>> units_;
  std::vector<std::pair<std::string, Tensor>> buffers_;  // by the model's names
  struct Pending {                                       // the gradient reduction in flight
    Unit* unit = nullptr;
    Tensor flat, shard_grad;
    Work work;
  };
  Pending pending_;
  bool in_backward_ = false;
  FSDPMemory memory_;
  size_t grads_now_ = 0;
};

}  // namespace engine::dist
