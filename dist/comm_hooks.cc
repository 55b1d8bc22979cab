#include "dist/comm_hooks.h"

#include "tensor/ops.h"

namespace engine::dist {

Future::Future(Tensor ready) : value_(std::move(ready)) {}

Future::Future(Work work, Tensor value) : work_(std::move(work)), has_work_(true), value_(std::move(value)) {}

Future Future::then(std::function<Tensor(Tensor)> step) && {
  steps_.push_back(std::move(step));
  return std::move(*this);
}

Tensor Future::wait() {
  ENGINE_REQUIRE(value_.defined(), "[Future] waited on an empty future (a hook returned Future())");
  if (has_work_) work_.wait();
  has_work_ = false;
  for (auto& step : steps_) value_ = step(value_);
  steps_.clear();
  return value_;
}

namespace hooks {
namespace {

// Round the averaged bucket to `wire` (a 16-bit dtype), sum it over the ranks, widen it back.
Future compress_hook(GradBucket& b, DType wire) {
  Tensor compressed = b.buffer.to(wire) / double(b.group->size());
  Tensor bucket = b.buffer;
  return Future(b.group->all_reduce(compressed, ReduceOp::Sum), compressed).then([bucket](Tensor reduced) mutable {
    bucket.copy_(reduced);  // widening is exact
    return bucket;
  });
}

}  // namespace

Future allreduce_hook(GradBucket& b) {
  Tensor t = b.buffer;
  mul_(t, 1.0 / double(b.group->size()));
  return Future(b.group->all_reduce(t, ReduceOp::Sum), t);
}

Future fp16_compress_hook(GradBucket& b) { return compress_hook(b, DType::Float16); }
Future bf16_compress_hook(GradBucket& b) { return compress_hook(b, DType::BFloat16); }

}  // namespace hooks
}  // namespace engine::dist
