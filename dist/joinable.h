// Joinable: something besides DDP that runs collectives at every training step, so that a
// rank whose data has run out must shadow them under a Join (join.h), as PyTorch's
// torch.distributed.algorithms.Joinable. ZeroRedundancyOptimizer is one: its step()
// all-gathers the updated shards.
//
//   dist::Join join(ddp, {&zero_optimizer});   // with Join([model, optim]):
//   ...
//   join.finish();   // a finished rank calls zero_optimizer.join_shadow_step() once for
//                    // every step the others still take, after DDP's shadow backward
#pragma once

namespace engine::dist {

class ProcessGroup;

class Joinable {
 public:
  virtual ~Joinable() = default;
  // What this rank does, with no data of its own, for one step the others take: the same
  // collectives, in the same order. Called after DDP's shadow backward has left the
  // others' averaged gradients in .grad.
  virtual void join_shadow_step() = 0;
  // The group those collectives run on; a Join requires it to be DDP's.
  virtual const ProcessGroup* join_process_group() const = 0;
  // Called on every rank at the start of every step under the Join, training or not: how
  // many ranks still train, and the highest of them (whose settings, a learning rate a
  // schedule changes, the finished ranks' shadow steps should follow).
  virtual void join_step_begins(int /*training*/, int /*highest_training*/) {}
  // Called when a Join holding it is made, and when that Join is destroyed.
  virtual void join_begins() {}
  virtual void join_ends() {}
};

}  // namespace engine::dist
