// Join: training with uneven inputs. When one rank runs out of data before the others,
// the others' next all-reduces would wait for it forever. Under a Join, each forward
// first counts the ranks still training (one small all-reduce), and a rank whose data has
// run out calls finish(): it then shadows the others' collectives, step after step (the
// same count, the same buffer broadcasts, an all-reduce of zeros for each bucket), until
// every rank has finished. Gradients are averaged over the initial world size, as
// PyTorch's default (divide_by_initial_world_size=True): a rank that has finished
// contributes zeros. Each step's buffers (batch-norm statistics) are broadcast from the
// highest rank still training (PyTorch's "authoritative rank"), not from a rank 0 that may
// have finished. At the end the last rank to finish broadcasts its parameters and
// buffers, so every replica ends the same.
//
//   dist::Join join(ddp);                        // with Join([model]):
//   for (const auto& batch : my_batches) {       //     for batch in my_batches:
//     opt.zero_grad();                           //         ...
//     cross_entropy(ddp(x), y).backward();
//     opt.step();
//   }
//   join.finish();                               // (the end of the with block)
//
// Every rank must construct its Join before its first forward and call finish() once.
// no_sync() is not supported inside a Join (the shadowing rank could not know that a step
// skipped its all-reduces).
//
// Other things that run collectives every step are passed beside the model, as PyTorch's
// Join([model, optim]): a ZeroRedundancyOptimizer (joinable.h) steps on a finished rank
// too, with the others' averaged gradients, and all-gathers the shards with them.
//
//   dist::ZeroRedundancyOptimizer opt(ddp.parameters(), ZeroOptimizer::Adam, {..., .ddp_averages_gradients = true});
//   dist::Join join(ddp, {&opt});
//
// State that changes with every step is passed too, to be taken from the last rank to
// finish: the optimizer (SGD's momentum, Adam's moments and step counts, the learning
// rate) and, under float16, the GradScaler. A finished rank's optimizer stops where its
// last step left it while the others' go on; the final broadcast makes the weights equal,
// and from the next step on each rank would apply the same averaged gradient through a
// different momentum (or divide it by a different scale): the replicas part. PyTorch's
// Join syncs the model only, and parts them so, silently (2 ranks, SGD with momentum 0.9:
// weights 0.026 apart two steps after the Join); here DDP's replica check (ddp.h) stops
// the run at the next check, naming JoinSync.
//
//   dist::Join join(ddp, {}, {.optimizers = {&opt}, .scaler = &scaler});
//
// A model with SyncBatchNorm is refused: its forward and backward are collectives too,
// interleaved with DDP's, which a finished rank has no batch to run (PyTorch's Join
// does not shadow them either). Give every rank the same number of batches instead.
#pragma once

#include <vector>

#include "dist/ddp.h"
#include "dist/joinable.h"
#include "nn/grad_scaler.h"
#include "nn/optimizer.h"

namespace engine::dist {

// What finish() also takes from the last rank to finish, with its weights and buffers.
struct JoinSync {
  std::vector<nn::Optimizer*> optimizers;  // their state_dict(), and the learning rate exactly
  nn::GradScaler* scaler = nullptr;        // its scale and growth tracker
};

class Join {
 public:
  explicit Join(DistributedDataParallel& ddp, std::vector<Joinable*> others = {}, JoinSync sync = {});
  ~Join();
  Join(const Join&) = delete;
  Join& operator=(const Join&) = delete;

  // This rank has no more data: shadow the others until all have finished, then take the
  // last finisher's model (and what JoinSync names). Returns the number of steps this rank shadowed.
  int finish();

 private:
  friend class DistributedDataParallel;
  int64_t count_training(bool still_training);      // the all-reduce each step starts with
  int buffer_root() const { return buffer_root_; }  // the highest rank still training
  void shadow_step();
  void sync_final_model(bool last_to_finish);
  void sync_optimizer(nn::Optimizer& opt, int root);
  void sync_scaler(int root);

  DistributedDataParallel& ddp_;
  std::vector<Joinable*> others_;
  JoinSync sync_;
  bool finished_ = false;
  int buffer_root_ = 0;
};

}  // namespace engine::dist
