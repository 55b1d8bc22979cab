// A process group that records every collective it runs into a Trace, from the moment it
// is started until the moment it completes, then forwards it to the real group. Give it to
// DistributedDataParallel and the timeline shows each bucket's all-reduce beside backward.
//
//   Trace trace(rank);
//   TracingGroup traced(dist::default_group(), trace);
//   DistributedDataParallel ddp(model, {.group = &traced});
//
// Collectives finish in the order they were started (every group here runs them in order),
// so one watcher thread that waits on each in turn sees each one complete.
#pragma once

#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>

#include "dist/process_group.h"
#include "lessons/common/trace.h"

namespace lessons {

class TracingGroup : public engine::dist::ProcessGroup {
 public:
  TracingGroup(engine::dist::ProcessGroup& inner, Trace& trace);
  ~TracingGroup() override;

  std::string backend() const override { return inner_.backend(); }
  engine::dist::Work all_reduce(engine::Tensor t, engine::dist::ReduceOp op) override;
  engine::dist::Work broadcast(engine::Tensor t, int root) override;
  engine::dist::Work all_gather(std::vector<engine::Tensor>* outputs, engine::Tensor input) override;
  engine::dist::Work reduce_scatter(engine::Tensor output, engine::Tensor input, engine::dist::ReduceOp op) override;
  engine::dist::Work barrier() override;
  engine::dist::Work send(engine::Tensor t, int dst) override;
  engine::dist::Work recv(engine::Tensor t, int src) override;
  engine::Tensor shared_buffer(int64_t numel) override { return inner_.shared_buffer(numel); }

  int collectives() const { return count_; }  // how many this group has run

 private:
  struct Pending {
    engine::dist::Work inner, outer;
    TraceEvent event;
  };
  engine::dist::Work watch(engine::dist::Work inner, const std::string& name);
  void watcher();

  engine::dist::ProcessGroup& inner_;
  Trace& trace_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Pending> queue_;
  bool stop_ = false;
  int count_ = 0;
  std::thread thread_;
};

}  // namespace lessons
