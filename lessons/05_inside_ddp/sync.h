// Three ways to average gradients over ranks, each a step of the track, each built on the
// one before. All of them leave in every .grad the mean over the ranks.
//
//   naive_sync(params, group);                  // step 5: after backward, one all-reduce per gradient
//
//   HookSync hooks(params, group);              // step 6: each all-reduce starts from the
//   loss.backward(); hooks.wait();              //   gradient-ready hook, during backward
//
//   BucketSync buckets(params, group, 0.25);    // step 7: gradients packed into buckets of
//   loss.backward(); buckets.wait();            //   ~0.25 MiB, one all-reduce per bucket
#pragma once

#include <memory>
#include <vector>

#include "autograd/variable.h"
#include "dist/process_group.h"

namespace inside {

using engine::autograd::Variable;
using engine::dist::ProcessGroup;

void naive_sync(std::vector<Variable> params, ProcessGroup& group);

class HookSync {
 public:
  HookSync(std::vector<Variable> params, ProcessGroup& group);
  ~HookSync();
  void wait();  // after backward: every all-reduce finished

 private:
  std::vector<Variable> params_;
  std::vector<int> hooks_;
  std::vector<engine::dist::Work> pending_;
};

// Buckets hold gradients in reverse registration order (the order backward produces
// them); a bucket closes once it holds cap_mb MiB or more (DDP's rule).
std::vector<std::vector<size_t>> plan_buckets(const std::vector<Variable>& params, double cap_mb);

class BucketSync {
 public:
  BucketSync(std::vector<Variable> params, ProcessGroup& group, double cap_mb);
  ~BucketSync();
  void wait();  // after backward: all buckets reduced, the means copied back into .grad
  const std::vector<std::vector<size_t>>& buckets() const { return plan_; }

 private:
  void ready(size_t param);
  std::vector<Variable> params_;
  ProcessGroup& group_;
  std::vector<std::vector<size_t>> plan_;
  std::vector<engine::Tensor> buffers_;            // one flat buffer per bucket
  std::vector<std::pair<size_t, int64_t>> where_;  // param -> (bucket, offset)
  std::vector<int> pending_;                       // gradients each bucket still waits for
  std::vector<engine::dist::Work> work_;
  size_t launched_ = 0;
  std::vector<int> hooks_;
};

}  // namespace inside
