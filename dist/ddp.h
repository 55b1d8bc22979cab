// DistributedDataParallel: wrap a model in one line and its gradients are averaged over all
// ranks during backward, so every replica takes the same optimizer step.
//
//   auto model = std::make_shared<Sequential>(...);
//   DistributedDataParallel ddp(model);              // broadcasts rank 0's weights
//   SGD opt(ddp.parameters(), {.lr = 0.05});
//   loss = cross_entropy(ddp(x), y);
//   loss.backward();                                 // all-reduces overlap the backward
//   opt.step();                                      // .grad holds the average over ranks
//   if (dist::get_rank() == 0) save_safetensors(path, ddp.module().state_dict());
//
// How (as PyTorch's DDP): the parameters are grouped, in reverse registration order (the
// order their gradients become ready), into buckets of about bucket_cap_mb (the first one
// about 1 MiB, so communication starts early). Each parameter's slot in its bucket is its
// grad destination (Variable::set_grad_destination), so a linear layer computes its weight
// gradient straight into the bucket; a gradient-ready hook on every parameter copies any
// other gradient there. When a bucket is full it is all-reduced (averaged)
// asynchronously, in bucket order on every rank, while backward goes on computing the
// earlier layers' gradients. When backward ends, DDP waits for the buckets and copies the
// averages back into .grad.
//
// register_comm_hook replaces the bucket's all-reduce with a hook (comm_hooks.h): gradients
// compressed to bfloat16 or float16, PowerSGD (powersgd.h), or your own.
//
// Parameters that do not require grad when DDP is built (frozen layers, as in fine-tuning)
// are broadcast from rank 0 with the rest but stay out of the buckets, as in PyTorch; a
// layer frozen or unfrozen after that is named at the next forward.
//
// A parameter that gets no gradient would leave its bucket waiting forever: DDP reports it
// by name at the end of backward, unless find_unused_parameters is set, in which case it
// finds them after each forward and counts them as ready (with a zero gradient).
//
// The replicas stay identical only while every rank changes its weights the same way. A
// checkpoint loaded on one rank after wrapping, or an optimizer whose state differs
// between ranks, breaks that with no error in PyTorch: each rank then computes its
// gradient at other weights, and the average means nothing. DDP compares the replicas (a
// hash of the parameters, one small all-reduce) at training forwards 1, 2, 4, 8, ... (in
// a Join, counting only forwards that no rank has finished before) and names the first
// parameter that differs, the rank and by how much. Differences of a few rounding errors
// (machines whose kernels round differently) are warned about and rank 0's weights are
// broadcast again; larger ones stop the run (check_replicas: false turns the check off).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "dist/comm_hooks.h"
#include "dist/process_group.h"
#include "nn/module.h"

namespace engine::dist {

class Join;

struct DDPOptions {
  double bucket_cap_mb = 25;
  double first_bucket_mb = 1;
  bool find_unused_parameters = false;
  bool broadcast_buffers = true;  // rank 0's buffers (e.g. batch-norm statistics) at every forward
  // At world size 1 the average is the gradient itself, so buckets are skipped; true runs
  // them anyway, as PyTorch does (to measure DDP's own cost, or test it on one GPU).
  bool reduce_when_alone = false;
  // As PyTorch's option of this name: after backward, each .grad is a view into its bucket
  // instead of a copy of it, which saves copying every gradient back (and their memory). A
  // .grad kept from an earlier step then changes when later steps reduce; zero_grad() drops
  // the view, as it drops any gradient.
  bool gradient_as_bucket_view = false;
  ProcessGroup* group = nullptr;  // nullptr: the default group
  bool check_replicas = true;     // compare the replicas at training forwards 1, 2, 4, ... (above)
};

class DistributedDataParallel : public nn::Module {
 public:
  explicit DistributedDataParallel(std::shared_ptr<nn::Module> module, DDPOptions options = {});
  ~DistributedDataParallel() override;

  nn::Variable forward(const nn::Variable& x) override;
  nn::Module& module() { return *module_; }

  // While a NoSync is alive, backward only accumulates gradients locally; the first
  // backward after it ends averages the accumulated gradients over the ranks.
  class NoSync {
   public:
    explicit NoSync(DistributedDataParallel& ddp) : ddp_(ddp), previous_(ddp.sync_) { ddp.sync_ = false; }
    ~NoSync() { ddp_.sync_ = previous_; }

   private:
    DistributedDataParallel& ddp_;
    bool previous_;
  };
  NoSync no_sync() { return NoSync(*this); }

  // From now on each full bucket goes to `hook` instead of the all-reduce (comm_hooks.h).
  // Once per DDP, before training, as in PyTorch. With a hook, buckets are reduced even at
  // world size 1 (the hook decides what "reduced" means there). Not with Join.
  void register_comm_hook(CommHook hook);

  // Introspection for tests and lessons: bucket layout, and how many buckets have been
  // launched in the backward in progress (or the last one).
  const std::vector<std::vector<std::string>>& bucket_names() const { return bucket_names_; }
  int buckets_launched() const { return launched_; }

 private:
  friend class Join;  // join.h: shadows this DDP's collectives for a rank out of data
  struct Bucket;
  void build_buckets();
  void broadcast_state(int root);              // every parameter and buffer from `root` to all
  void broadcast_buffers_if_needed(int root);  // each forward: batch-norm statistics from `root`
  void reduce_zero_buckets();                  // a step's all-reduces with nothing to add (Join's shadow)
  void check_frozen_unchanged() const;
  void check_replicas_if_due();  // forward(): at training forwards 1, 2, 4, ... that every rank takes
  void check_replicas();
  void release_parameters();  // another DDP may wrap them now
  void on_grad_ready(size_t param);
  void mark_ready(size_t param, const Tensor* grad);
  Tensor slot(size_t param) const;  // the parameter's place in its bucket, shaped like it
  void launch_ready_buckets();
  void finalize();
  void copy_averages_to_grads();
  void reset_for_backward();

  std::shared_ptr<nn::Module> module_;
  DDPOptions options_;
  ProcessGroup* group_;
  std::vector<nn::Variable> params_;  // those that require grad: the ones reduced
  std::vector<std::string> names_;
  std::vector<nn::Variable> all_params_;  // frozen ones too: broadcast, and watched by forward()
  std::vector<bool> frozen_;              // per all_params_: requires_grad was false when built
  std::vector<std::unique_ptr<Bucket>> buckets_;
  std::vector<std::vector<std::string>> bucket_names_;
  std::vector<std::pair<size_t, size_t>> where_;  // param -> (bucket, offset in elements)
  std::vector<bool> ready_;
  std::vector<int> hook_ids_;
  int launched_ = 0;
  bool sync_ = true;
  bool finalize_queued_ = false;
  CommHook hook_;
  Join* join_ = nullptr;  // the Join this DDP is in, if any
  int64_t forwards_ = 0;  // training forwards every rank took: the replicas are compared at powers of 2
};

// Saves `state` to `path` from rank 0 only (atomically, as safetensors), then waits at a
// barrier so that no rank goes on to read the file before it is complete.
void save_on_rank0(const std::string& path, const nn::StateDict& state, ProcessGroup* group = nullptr);

}  // namespace engine::dist
