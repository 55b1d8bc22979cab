// The collectives of the CPU backend (tcp_group.h), each queued for the worker thread.
// all_reduce's ring is in allreduce_ring.cc; setup is in tcp_mesh.cc, messaging in tcp_messages.cc.
#include <cstring>
#include <vector>

#include "dist/reduce_into.h"
#include "dist/tcp_group.h"
#include "dist/tcp_wire.h"
#include "tensor/ops.h"

namespace engine::dist {

using namespace wire;

namespace {
bool all_contiguous(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (!t.is_contiguous()) return false;
  return true;
}

// Whether the tensors are contiguous blocks that follow each other in one storage.
bool one_after_another(const std::vector<Tensor>& ts) {
  for (size_t r = 0; r < ts.size(); ++r)
    if (!ts[r].is_contiguous() || ts[r].storage() != ts[0].storage() ||
        ts[r].bytes() != ts[0].bytes() + r * ts[0].nbytes())
      return false;
  return true;
}
}  // namespace

Work ProcessGroupTCP::all_reduce(Tensor t, ReduceOp op) {
  require_cpu_tensor("all_reduce", t);
  ENGINE_REQUIRE(op != ReduceOp::Avg || is_floating(t.dtype()), "[all_reduce] AVG needs a floating-point tensor, got ",
                 dtype_name(t.dtype()));
  return enqueue(make_desc(kAllReduce, &t, op),
                 [this, t, op](const MessageHeader& desc, Deadline d) { run_all_reduce(t, op, desc, d); });
}

Work ProcessGroupTCP::barrier() {
  // A barrier is an all-reduce of one number: nobody finishes before everybody started.
  Tensor one = ones({1}, DType::Int64);
  return enqueue(make_desc(kBarrier, &one), [this, one](const MessageHeader& desc, Deadline d) {
    // With shared memory between all ranks, agree() was the barrier.
    if (algorithm_ != AllReduceAlgorithm::SharedMemory) run_all_reduce(one, ReduceOp::Sum, desc, d);
  });
}

Work ProcessGroupTCP::broadcast(Tensor t, int root) {
  require_cpu_tensor("broadcast", t);
  ENGINE_REQUIRE(root >= 0 && root < size_, "[broadcast] root ", root, " is outside 0..", size_ - 1);
  return enqueue(make_desc(kBroadcast, &t, ReduceOp::Sum, root),
                 [this, t, root](const MessageHeader& desc, Deadline d) {
                   if (algorithm_ == AllReduceAlgorithm::Hierarchical)
                     return hierarchical_broadcast(t.bytes(), t.numel(), t.dtype(), root, desc, d);
                   if (algorithm_ == AllReduceAlgorithm::SharedMemory)
                     return shm_->broadcast(t.bytes(), t.nbytes(), root, d);
                   // The ring's form: the root sends its tensor to every other rank directly (a tree
                   // would spread the root's sending over all ranks). Each receiver then acknowledges
                   // with its own description of the call (no agree() compared the calls here):
                   // without that, a root would return normally whatever the others had called.
                   MessageHeader h = desc, ack = desc;
                   const size_t nbytes = t.nbytes();
                   h.bytes = nbytes;
                   ack.step = 1;
                   char* data = t.bytes();
                   if (rank_ == root) {
                     for (int r = 0; r < size_; ++r)
                       if (r != root) send_message(r, h, data, d);
                     for (int r = 0; r < size_; ++r)
                       if (r != root) recv_message(r, ack, nullptr, d);
                   } else {
                     recv_message(root, h, data, d);
                     send_message(root, ack, nullptr, d);
                   }
                 });
}

Work ProcessGroupTCP::all_gather(std::vector<Tensor>* outputs, Tensor input) {
  require_cpu_tensor("all_gather", input);
  ENGINE_REQUIRE(outputs != nullptr, "[all_gather] outputs is null");
  const int64_t m = input.numel();
  // The blocks (block r = rank r's input) are gathered straight into the outputs, wherever
  // each lies: PyTorch's usual list of torch.empty()s, or the rows of one tensor. An empty
  // list is filled with views of one new tensor, one after another (as torch.chunk's are).
  // Only strided outputs, and a hierarchical job's outputs that do not follow each other (it
  // gathers into one buffer), go through a tensor of its own, copied into them after.
  Tensor staging;
  if (!given_outputs("all_gather", *outputs, input, size_)) {
    Tensor all = empty({int64_t(size_) * m}, input.dtype());
    outputs->assign(size_t(size_), Tensor());
    for (int r = 0; r < size_; ++r) (*outputs)[size_t(r)] = all.narrow(0, int64_t(r) * m, m).view(input.shape());
  } else if (!all_contiguous(*outputs) ||
             (algorithm_ == AllReduceAlgorithm::Hierarchical && !one_after_another(*outputs))) {
    staging = empty({int64_t(size_) * m}, input.dtype());
  } else {
    for (int r = 0; r < size_; ++r) {  // an input inside another block is read only after that is written
      const Tensor& o = (*outputs)[size_t(r)];
      if (share_memory(o, input) && !(r == rank_ && o.bytes() == input.bytes())) input = input.clone();
    }
  }
  return enqueue(make_desc(kAllGather, &input), [this, outputs, input, staging](const MessageHeader& desc, Deadline d) {
    const int64_t m = input.numel();
    const size_t es = dtype_size(input.dtype());
    std::vector<char*> blocks(static_cast<size_t>(size_));
    for (int r = 0; r < size_; ++r)
      blocks[size_t(r)] =
          staging.defined() ? staging.bytes() + size_t(r) * size_t(m) * es : (*outputs)[size_t(r)].bytes();
    const char* mine = input.bytes();
    if (algorithm_ == AllReduceAlgorithm::Hierarchical) {
      hierarchical_all_gather(blocks[0], mine, m, input.dtype(), desc, d);  // blocks one after another
    } else if (algorithm_ == AllReduceAlgorithm::SharedMemory) {
      shm_->all_gather(blocks, mine, size_t(m) * es, d);
    } else {
      std::memmove(blocks[size_t(rank_)], mine, size_t(m) * es);  // mine may be that block already
      std::vector<int64_t> bounds(size_t(size_) + 1);
      for (int k = 0; k <= size_; ++k) bounds[k] = int64_t(k) * m;
      ring_all_gather(full_ring(), blocks, bounds, input.dtype(), desc, /*owned_shift=*/-1, d);
    }
    if (staging.defined())
      for (int r = 0; r < size_; ++r)
        (*outputs)[size_t(r)].copy_(staging.narrow(0, int64_t(r) * m, m).view(input.shape()));
  });
}

Work ProcessGroupTCP::all_gather_into_tensor(Tensor output, Tensor input) {
  require_cpu_tensor("all_gather_into_tensor", input);
  require_cpu_tensor("all_gather_into_tensor", output);
  ENGINE_REQUIRE(output.numel() == input.numel() * size_ && output.dtype() == input.dtype(),
                 "[all_gather_into_tensor] output of ", output.numel(), " ", dtype_name(output.dtype()),
                 " must hold world size (", size_, ") x input (", input.numel(), " ", dtype_name(input.dtype()), ")");
  return enqueue(make_desc(kAllGather, &input), [this, output, input](const MessageHeader& desc, Deadline d) {
    // The ring all-gathers straight into the output: block r = rank r's input.
    const int64_t m = input.numel();
    const size_t es = dtype_size(input.dtype());
    char* buf = output.bytes();
    if (algorithm_ == AllReduceAlgorithm::Hierarchical)
      return hierarchical_all_gather(buf, input.bytes(), m, input.dtype(), desc, d);
    if (algorithm_ == AllReduceAlgorithm::SharedMemory) return shm_->all_gather(buf, input.bytes(), size_t(m) * es, d);
    std::memmove(buf + size_t(rank_) * size_t(m) * es, input.bytes(), size_t(m) * es);
    std::vector<int64_t> bounds(size_t(size_) + 1);
    for (int k = 0; k <= size_; ++k) bounds[size_t(k)] = int64_t(k) * m;
    ring_all_gather(full_ring(), buf, bounds, input.dtype(), desc, /*owned_shift=*/-1, d);
  });
}

Work ProcessGroupTCP::reduce_scatter(Tensor output, Tensor input, ReduceOp op) {
  require_cpu_tensor("reduce_scatter", input);
  require_cpu_tensor("reduce_scatter", output);
  ENGINE_REQUIRE(input.numel() == output.numel() * size_ && input.dtype() == output.dtype(),
                 "[reduce_scatter] input of ", input.numel(), " ", dtype_name(input.dtype()), " must hold world size (",
                 size_, ") x output (", output.numel(), " ", dtype_name(output.dtype()), ")");
  ENGINE_REQUIRE(op != ReduceOp::Avg || is_floating(input.dtype()),
                 "[reduce_scatter] AVG needs a floating-point tensor");
  return enqueue(
      make_desc(kReduceScatter, &input, op), [this, output, input, op](const MessageHeader& desc, Deadline d) {
        const int64_t m = output.numel();
        const size_t es = dtype_size(input.dtype());
        // Shared memory writes straight into the output, which may be apart from the
        // input or this rank's own block of it (FSDP's flat gradient).
        const bool apart_or_own =
            output.storage() != input.storage() || output.bytes() == input.bytes() + size_t(rank_ * m) * es;
        if (algorithm_ == AllReduceAlgorithm::SharedMemory && apart_or_own)
          return shm_->reduce_scatter(output.bytes(), input.bytes(), m, input.dtype(), op, d);
        if (algorithm_ != AllReduceAlgorithm::Ring) {
          // The result goes to a block of its own first, since the output may overlap
          // the input elsewhere.
          Tensor mine = empty({m}, output.dtype());
          if (algorithm_ == AllReduceAlgorithm::SharedMemory)
            shm_->reduce_scatter(mine.bytes(), input.bytes(), m, input.dtype(), op, d);
          else
            hierarchical_reduce_scatter(mine.bytes(), input.bytes(), m, input.dtype(), op, desc, d);
          Tensor(output).copy_(mine.view(output.shape()));
          return;
        }
        // The ring leaves the input as it was and sums into the output, unless the
        // output overlaps the input elsewhere than in this rank's block.
        Tensor mine = apart_or_own ? output : empty({m}, output.dtype());
        std::vector<int64_t> bounds(size_t(size_) + 1);
        for (int k = 0; k <= size_; ++k) bounds[k] = int64_t(k) * m;
        // shift -1: rank r ends owning block r, the one it should return.
        ring_reduce_scatter_into(full_ring(), input.bytes(), mine.bytes(), bounds, input.dtype(), op, desc, -1, d);
        if (op == ReduceOp::Avg) divide_by(mine.bytes(), m, mine.dtype(), size_);  // once, after the sums
        if (!apart_or_own) Tensor(output).copy_(mine.view(output.shape()));
      });
}

Work ProcessGroupTCP::send(Tensor t, int dst) {
  require_cpu_tensor("send", t);
  ENGINE_REQUIRE(dst >= 0 && dst < size_ && dst != rank_, "[send] destination ", dst, " must be another rank in 0..",
                 size_ - 1);
  MessageHeader desc = make_desc(kPointToPoint, &t);
  return enqueue(desc, [this, t, dst](const MessageHeader& base, Deadline d) {
    MessageHeader h = base;
    h.seq = sent_to_[dst]++;
    h.bytes = t.nbytes();
    send_message(dst, h, t.bytes(), d);
  });
}

Work ProcessGroupTCP::recv(Tensor t, int src) {
  require_cpu_tensor("recv", t);
  ENGINE_REQUIRE(src >= 0 && src < size_ && src != rank_, "[recv] source ", src, " must be another rank in 0..",
                 size_ - 1);
  MessageHeader desc = make_desc(kPointToPoint, &t);
  return enqueue(desc, [this, t, src](const MessageHeader& base, Deadline d) {
    MessageHeader h = base;
    h.seq = received_from_[src]++;
    h.bytes = t.nbytes();
    recv_message(src, h, t.bytes(), d);
  });
}

}  // namespace engine::dist
