// The CPU backend's wire format: the header in front of every message, its constants, and
// the helpers that describe calls, shared by tcp_mesh.cc (setup), tcp_group.cc (worker),
// tcp_messages.cc (messages) and tcp_collectives.cc (the calls).
//
//   MessageHeader h = wire::make_desc(wire::kAllReduce, &tensor, ReduceOp::Sum);
//   std::string what = wire::describe(h);   // "all_reduce(SUM, 1024 x float32) #0"
#pragma once

#include <string>

#include "dist/process_group.h"
#include "tensor/check.h"

namespace engine::dist {

// The fixed-size header in front of every message. Both sides know what they expect, so a
// header that differs is a mismatched call, named with both sides' arguments.
struct MessageHeader {
  uint32_t magic;
  uint32_t kind;   // kData or kAbort
  uint64_t seq;    // collective number (or point-to-point number for send/recv)
  uint64_t count;  // elements in the whole call
  uint64_t bytes;  // payload bytes that follow (abort: the text's length)
  uint16_t coll, op, dtype, step;
  int32_t root;
  uint32_t pad;
};
static_assert(sizeof(MessageHeader) == 48, "the header is sent as raw bytes");

namespace wire {

constexpr uint32_t kMagic = 0x44445044;  // "DDPD"
constexpr uint32_t kData = 1, kAbort = 2;
constexpr uint64_t kMaxAbortText = 4096;

enum Coll : uint16_t {
  kAllReduce = 1,
  kBroadcast,
  kAllGather,
  kReduceScatter,
  kBarrier,
  kPointToPoint,
  kGather,
  kScatter,
  kReduce,
  kAllToAll,
  kNewGroup
};

inline const char* coll_name(uint16_t c) {
  switch (c) {
    case kAllReduce: return "all_reduce";
    case kBroadcast: return "broadcast";
    case kAllGather: return "all_gather";
    case kReduceScatter: return "reduce_scatter";
    case kBarrier: return "barrier";
    case kPointToPoint: return "send/recv";
    case kGather: return "gather";
    case kScatter: return "scatter";
    case kReduce: return "reduce";
    case kAllToAll: return "all_to_all";
    case kNewGroup: return "new_group";
  }
  return "an unknown call";
}

// "all_reduce(SUM, 1024 x float32) #12", as a learner would write the call.
inline std::string describe(const MessageHeader& h) {
  std::string s = coll_name(h.coll);
  s += "(";
  if (h.coll == kAllReduce || h.coll == kReduceScatter || h.coll == kReduce)
    s += std::string(reduce_op_name(ReduceOp(h.op))) + ", ";
  if (h.coll == kBroadcast) s += "root " + std::to_string(h.root) + ", ";
  if (h.coll == kScatter) s += "src " + std::to_string(h.root) + ", ";
  if (h.coll == kGather || h.coll == kReduce) s += "dst " + std::to_string(h.root) + ", ";
  // all_to_all: count is the world size; a message between two ranks (a step from 1 on)
  // carries its piece's size.
  if (h.coll == kAllToAll && h.step > 0 && dtype_size(DType(h.dtype)) > 0)
    return s + std::to_string(h.bytes / dtype_size(DType(h.dtype))) + " x " + dtype_name(DType(h.dtype)) +
           " to this rank) #" + std::to_string(h.seq);
  if (h.coll == kAllToAll)
    return s + dtype_name(DType(h.dtype)) + " pieces among " + std::to_string(h.count) + " ranks) #" +
           std::to_string(h.seq);
  s += std::to_string(h.count) + " x " + dtype_name(DType(h.dtype)) + ") #" + std::to_string(h.seq);
  return s;
}

inline std::string describe_call(const CallDescriptor& c) {
  MessageHeader h{};
  h.seq = c.seq, h.count = c.count, h.coll = uint16_t(c.coll), h.op = uint16_t(c.op), h.dtype = uint16_t(c.dtype);
  h.root = c.root;
  return describe(h);
}

inline CallDescriptor to_call(const MessageHeader& h) {
  CallDescriptor c;
  c.seq = h.seq, c.count = h.count, c.coll = h.coll, c.op = h.op, c.dtype = h.dtype, c.root = h.root;
  return c;
}

inline MessageHeader make_desc(uint16_t coll, const Tensor* t, ReduceOp op = ReduceOp::Sum, int root = -1) {
  MessageHeader h{};
  h.magic = kMagic;
  h.kind = kData;
  h.coll = coll;
  h.op = uint16_t(op);
  h.root = root;
  if (t) {
    h.count = uint64_t(t->numel());
    h.dtype = uint16_t(t->dtype());
  }
  return h;
}

inline void require_cpu_tensor(const char* op, const Tensor& t) {
  ENGINE_REQUIRE(t.defined(), "[", op, "] tensor is undefined");
  ENGINE_REQUIRE(t.device().is_cpu(), "[", op, "] the tcp backend handles CPU tensors; this one is on ",
                 t.device().str(), " (use the nccl backend for GPU tensors)");
  ENGINE_REQUIRE(t.is_contiguous(), "[", op, "] needs a contiguous tensor (call .contiguous() first)");
}

}  // namespace wire
}  // namespace engine::dist
