// DDP communication hooks: how a bucket of gradients is averaged over the ranks, as
// PyTorch's DistributedDataParallel.register_comm_hook. Without a hook DDP all-reduces
// each bucket (AVG); a hook can compress what travels, or run another algorithm.
//
//   DistributedDataParallel ddp(model);
//   ddp.register_comm_hook(hooks::bf16_compress_hook);   // half the bytes on the wire
//
//   // or your own: it gets the bucket and returns a Future of the averaged bucket.
//   ddp.register_comm_hook([](GradBucket& b) {
//     Tensor t = b.buffer / double(b.group->size());
//     return Future(b.group->all_reduce(t, ReduceOp::Sum), t);
//   });
//
// The contract (PyTorch's): the hook is called once per bucket as soon as the bucket is
// full, in bucket order on every rank, with this rank's gradients (summed over the batch,
// not yet averaged); it must start the same collectives in the same order on every rank,
// and its Future must yield a float32 tensor of the bucket's size holding the average,
// which DDP copies into the gradients when backward ends. Continuations added with then()
// run on the training thread when DDP waits, in bucket order, so they may start more
// collectives (PowerSGD does: powersgd.h).
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace engine::dist {

// One bucket, as a hook sees it (PyTorch's dist.GradBucket).
struct GradBucket {
  int index = 0;                   // 0, 1, ... in the order buckets fill (reverse registration order)
  bool is_last = false;            // the last bucket of this backward
  Tensor buffer;                   // every gradient of the bucket, flattened back to back (float32)
  std::vector<Tensor> gradients;   // views of `buffer`, shaped as the parameters
  std::vector<std::string> names;  // the parameters' names, in the same order
  ProcessGroup* group = nullptr;   // DDP's process group
};

// A value that is ready once a collective finishes, with steps to run after it (PyTorch's
// torch.futures.Future as DDP hooks use it).
class Future {
 public:
  Future() = default;
  explicit Future(Tensor ready);    // already complete
  Future(Work work, Tensor value);  // `value` holds the result once `work` is done
  // Adds a step that turns the value into the next one; runs inside wait().
  Future then(std::function<Tensor(Tensor)> step) &&;
  // Waits for the collective, runs the steps in order, and returns the final value.
  // Throws engine::Error if the collective failed. Once only.
  Tensor wait();
  bool defined() const { return value_.defined(); }

 private:
  Work work_;
  bool has_work_ = false;
  Tensor value_;
  std::vector<std::function<Tensor(Tensor)>> steps_;
};

using CommHook = std::function<Future(GradBucket&)>;

namespace hooks {

// What DDP does without a hook, as PyTorch's allreduce_hook: divide by the world size,
// then all-reduce (SUM). (DDP itself sums, then divides: the last bits can differ.)
Future allreduce_hook(GradBucket& bucket);
// Divide by the world size, round to float16 (or bfloat16), all-reduce those 2-byte
// values, and widen the result back into the bucket: half the bytes of float32 on the
// wire, for about 3 (or 2) significant digits in the averaged gradient. float16's range
// ends at 65504, so huge gradients become infinite; bfloat16 keeps float32's range.
Future fp16_compress_hook(GradBucket& bucket);
Future bf16_compress_hook(GradBucket& bucket);

}  // namespace hooks

}  // namespace engine::dist
