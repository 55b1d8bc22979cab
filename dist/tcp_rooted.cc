// The CPU backend's rooted collectives (gather, scatter, reduce) and all_to_all
// (tcp_group.h). Like broadcast, a rooted transfer goes straight between the root
// and each rank; every message carries the call's description, so a rank that called
// something else is named. With every rank on one machine they go through shared memory
// instead (shm_collectives.cc), after agree() has compared the calls. Across machines with
// several ranks on some, reduce is the hierarchical all-reduce (allreduce_hierarchical.cc).
#include <algorithm>
#include <cstring>

#include "dist/reduce_into.h"
#include "dist/tcp_group.h"
#include "dist/tcp_wire.h"
#include "tensor/ops.h"

namespace engine::dist {

using namespace wire;

namespace {

// The step number of reduce's last messages, each rank's finished segment on its way to dst
// (the ring's own steps are numbered from 0).
constexpr uint16_t kToRootStep = 0xffff;

void require_root(const char* op, int root, int size) {
  ENGINE_REQUIRE(root >= 0 && root < size, "[", op, "] root ", root, " is outside 0..", size - 1);
}

// Byte offset of each piece, and its size, from rows per piece.
std::vector<size_t> byte_offsets(const std::vector<int64_t>& rows, size_t row_bytes) {
  std::vector<size_t> at(rows.size() + 1, 0);
  for (size_t i = 0; i < rows.size(); ++i) at[i + 1] = at[i] + size_t(rows[i]) * row_bytes;
  return at;
}

}  // namespace

Work ProcessGroupTCP::gather(std::vector<Tensor>* outputs, Tensor input, int dst) {
  require_cpu_tensor("gather", input);
  require_root("gather", dst, size_);
  ENGINE_REQUIRE(outputs != nullptr || rank_ != dst, "[gather] outputs is null on the destination rank ", dst);
  if (rank_ != dst) {
    if (outputs) outputs->clear();
  } else if (!given_outputs("gather", *outputs, input, size_)) {
    for (int r = 0; r < size_; ++r) outputs->push_back(empty(input.shape(), input.dtype()));
  } else {
    for (int r = 0; r < size_; ++r)  // an output that is the input: received into only after it is read
      if (r != dst && share_memory((*outputs)[size_t(r)], input)) input = input.clone();
  }
  return enqueue(make_desc(kGather, &input, ReduceOp::Sum, dst),
                 [this, outputs, input, dst](const MessageHeader& desc, Deadline d) {
                   if (algorithm_ == AllReduceAlgorithm::SharedMemory) return gather_shm(outputs, input, dst, d);
                   MessageHeader h = desc, ack = desc;
                   h.bytes = input.nbytes();
                   ack.step = 1;
                   if (rank_ != dst) {
                     send_message(dst, h, input.bytes(), d);
                     recv_message(dst, ack, nullptr, d);  // so a sender learns of a mismatch too
                     return;
                   }
                   for (int r = 0; r < size_; ++r) {
                     Tensor& out = (*outputs)[size_t(r)];
                     if (r == rank_) {
                       out.copy_(input);
                     } else if (out.is_contiguous()) {
                       recv_message(r, h, out.bytes(), d);
                     } else {  // a strided view the caller gave: received whole, then copied in
                       Tensor whole = empty(input.shape(), input.dtype());
                       recv_message(r, h, whole.bytes(), d);
                       out.copy_(whole);
                     }
                   }
                   for (int r = 0; r < size_; ++r)
                     if (r != rank_) send_message(r, ack, nullptr, d);
                 });
}

// gather through shared memory: straight into the outputs where they are contiguous.
void ProcessGroupTCP::gather_shm(std::vector<Tensor>* outputs, const Tensor& input, int dst, Deadline d) {
  std::vector<Tensor> into;
  std::vector<char*> at;
  for (size_t r = 0; rank_ == dst && r < outputs->size(); ++r) {
    const Tensor& out = (*outputs)[r];
    into.push_back(out.is_contiguous() ? out : empty(input.shape(), input.dtype()));
    at.push_back(into.back().bytes());
  }
  shm_->gather(at, input.bytes(), input.nbytes(), dst, d);
  for (size_t r = 0; r < into.size(); ++r)
    if (!(*outputs)[r].is_contiguous()) (*outputs)[r].copy_(into[r]);
}

Work ProcessGroupTCP::scatter(Tensor output, const std::vector<Tensor>& inputs, int src) {
  require_cpu_tensor("scatter", output);
  require_root("scatter", src, size_);
  std::vector<Tensor> pieces;
  if (rank_ == src) {
    ENGINE_REQUIRE(int(inputs.size()) == size_, "[scatter] src ", src, " gave ", inputs.size(),
                   " inputs; the world size is ", size_);
    for (int r = 0; r < size_; ++r) {
      const Tensor& in = inputs[size_t(r)];
      ENGINE_REQUIRE(in.defined() && in.shape() == output.shape() && in.dtype() == output.dtype(), "[scatter] inputs[",
                     r, "] must have the output's shape ", shape_str(output.shape()), " and dtype ",
                     dtype_name(output.dtype()));
      pieces.push_back(in.device().is_cpu() ? in.contiguous() : in);
      require_cpu_tensor("scatter", pieces.back());
      if (r != src && share_memory(pieces.back(), output))  // sent after src's own piece is written
        pieces.back() = pieces.back().clone();
    }
  }
  return enqueue(make_desc(kScatter, &output, ReduceOp::Sum, src),
                 [this, output, pieces, src](const MessageHeader& desc, Deadline d) {
                   if (algorithm_ == AllReduceAlgorithm::SharedMemory) {
                     std::vector<const char*> ins;
                     for (const Tensor& p : pieces) ins.push_back(p.bytes());
                     return shm_->scatter(output.bytes(), ins, output.nbytes(), src, d);
                   }
                   MessageHeader h = desc, ack = desc;
                   h.bytes = output.nbytes();
                   ack.step = 1;
                   if (rank_ != src) {
                     recv_message(src, h, output.bytes(), d);
                     send_message(src, ack, nullptr, d);
                     return;
                   }
                   for (int r = 0; r < size_; ++r)
                     if (r != rank_) send_message(r, h, pieces[size_t(r)].bytes(), d);
                   Tensor(output).copy_(pieces[size_t(rank_)]);
                   for (int r = 0; r < size_; ++r)
                     if (r != rank_) recv_message(r, ack, nullptr, d);
                 });
}

Work ProcessGroupTCP::reduce(Tensor t, int dst, ReduceOp op) {
  require_cpu_tensor("reduce", t);
  require_root("reduce", dst, size_);
  ENGINE_REQUIRE(op != ReduceOp::Avg || is_floating(t.dtype()), "[reduce] AVG needs a floating-point tensor, got ",
                 dtype_name(t.dtype()));
  return enqueue(make_desc(kReduce, &t, op, dst), [this, t, dst, op](const MessageHeader& desc, Deadline d) {
    if (algorithm_ == AllReduceAlgorithm::SharedMemory)
      return shm_->reduce(t.bytes(), t.numel(), t.dtype(), op, dst, d);
    if (algorithm_ == AllReduceAlgorithm::Hierarchical) {
      // Across machines the hierarchical all-reduce crosses fewer link bytes than the flat
      // ring below: 2(m-1)/m of the tensor between m machine leaders, against (n-1)/n for n
      // ranks plus the finished segments sent on to dst's machine (2 x 2 ranks: 1 against
      // 5/4, into dst's machine). Only dst keeps the result; the others reduce a copy.
      Tensor work = rank_ == dst ? t : t.clone();
      return hierarchical_all_reduce(work.bytes(), work.numel(), work.dtype(), op, desc, d);
    }
    // A ring reduce-scatter (every rank sends (n-1)/n of the tensor), then each rank sends
    // the segment it finished to dst: dst receives (n-1)/n of it, not (n-1) whole copies.
    const int64_t n = t.numel();
    const size_t es = dtype_size(t.dtype());
    std::vector<int64_t> bounds(size_t(size_) + 1);
    for (int k = 0; k <= size_; ++k) bounds[size_t(k)] = n * k / size_;
    MessageHeader h = desc;
    h.step = kToRootStep;
    if (rank_ != dst) {  // its tensor stays as it was: its finished segment (rank r owns segment r) goes apart
      std::vector<char> mine(size_t(bounds[size_t(rank_) + 1] - bounds[size_t(rank_)]) * es);
      ring_reduce_scatter_into(full_ring(), t.bytes(), mine.data(), bounds, t.dtype(), op, desc, /*shift=*/-1, d);
      h.bytes = mine.size();
      send_message(dst, h, mine.data(), d);
      return;
    }
    // dst's tensor is overwritten whole (its segment here, the others' from them): reduced in place.
    char* buf = t.bytes();
    ring_reduce_scatter(full_ring(), buf, bounds, t.dtype(), op, desc, /*shift=*/-1, d);
    for (int r = 0; r < size_; ++r) {
      if (r == rank_) continue;
      h.bytes = size_t(bounds[size_t(r) + 1] - bounds[size_t(r)]) * es;
      recv_message(r, h, buf + size_t(bounds[size_t(r)]) * es, d);
    }
    if (op == ReduceOp::Avg) divide_by(buf, n, t.dtype(), size_);  // the ring sums; the average divides once
  });
}

Work ProcessGroupTCP::all_to_all(Tensor output, Tensor input, std::vector<int64_t> output_splits,
                                 std::vector<int64_t> input_splits) {
  require_cpu_tensor("all_to_all", input);
  require_cpu_tensor("all_to_all", output);
  ENGINE_REQUIRE(input.dtype() == output.dtype(), "[all_to_all] input is ", dtype_name(input.dtype()),
                 " but output is ", dtype_name(output.dtype()));
  if (share_memory(input, output)) input = input.clone();  // pieces are received while others are still to send
  const int64_t in_rows = input.dim() == 0 ? 1 : input.size(0), out_rows = output.dim() == 0 ? 1 : output.size(0);
  const size_t row_bytes = in_rows == 0 ? 0 : input.nbytes() / size_t(in_rows);
  ENGINE_REQUIRE(out_rows == 0 || output.nbytes() / size_t(out_rows) == row_bytes || in_rows == 0,
                 "[all_to_all] a row of output must hold as many elements as a row of input");
  const std::vector<size_t> in_at = byte_offsets(all_to_all_rows("input", input_splits, input, size_), row_bytes);
  const std::vector<size_t> out_at = byte_offsets(all_to_all_rows("output", output_splits, output, size_), row_bytes);
  const size_t mine_in = in_at[size_t(rank_) + 1] - in_at[size_t(rank_)],
               mine_out = out_at[size_t(rank_) + 1] - out_at[size_t(rank_)];
  ENGINE_REQUIRE(mine_in == mine_out, "[all_to_all] rank ", rank_, " sends itself ",
                 mine_in / std::max<size_t>(row_bytes, 1), " rows but expects ",
                 mine_out / std::max<size_t>(row_bytes, 1), " from itself");
  MessageHeader desc = make_desc(kAllToAll, &input);
  desc.count = uint64_t(size_);  // the pieces differ in size between ranks; each message carries its own
  return enqueue(desc, [this, output, input, in_at, out_at](const MessageHeader& base, Deadline d) {
    char* in = input.bytes();
    char* out = output.bytes();
    if (algorithm_ == AllReduceAlgorithm::SharedMemory) return all_to_all_shm(base, out, out_at, in, in_at, d);
    std::memcpy(out + out_at[size_t(rank_)], in + in_at[size_t(rank_)],
                in_at[size_t(rank_) + 1] - in_at[size_t(rank_)]);
    // Step k: send to rank + k, receive from rank - k, both at once; every pair meets once.
    for (int k = 1; k < size_; ++k) {
      const int to = (rank_ + k) % size_, from = (rank_ - k + size_) % size_;
      MessageHeader h_out = base, h_in = base;
      h_out.step = h_in.step = uint16_t(k);
      h_out.bytes = in_at[size_t(to) + 1] - in_at[size_t(to)];
      h_in.bytes = out_at[size_t(from) + 1] - out_at[size_t(from)];
      send_recv({to, h_out, in + in_at[size_t(to)]}, {from, h_in, out + out_at[size_t(from)]}, d);
    }
  });
}

// all_to_all through shared memory. The pieces' sizes differ between pairs and agree()
// compared only the world size, so the ranks first gather every rank's piece sizes: each
// checks both ends of every pair (all fail alike, naming the first pair that disagrees,
// as the socket path names it) and finds the largest piece, which sets the chunk count.
void ProcessGroupTCP::all_to_all_shm(const MessageHeader& base, char* out, const std::vector<size_t>& out_at,
                                     const char* in, const std::vector<size_t>& in_at, Deadline d) {
  const size_t n = size_t(size_);
  std::vector<uint64_t> mine(2 * n), all(2 * n * n);  // rank r: [sends to k..., receives from k...]
  for (size_t k = 0; k < n; ++k) mine[k] = in_at[k + 1] - in_at[k], mine[n + k] = out_at[k + 1] - out_at[k];
  shm_->all_gather(reinterpret_cast<char*>(all.data()), reinterpret_cast<const char*>(mine.data()),
                   mine.size() * sizeof(uint64_t), d);
  size_t largest = 0;
  for (size_t i = 0; i < n; ++i)
    for (size_t k = 0; k < n; ++k) {
      const uint64_t sends = all[i * 2 * n + k], expects = all[k * 2 * n + n + i];
      largest = std::max(largest, size_t(sends));
      if (sends == expects) continue;
      MessageHeader got = base, expect = base;
      got.bytes = sends, expect.bytes = expects;
      got.step = expect.step = 1;  // described as a piece (tcp_wire.h)
      throw Error("[dist] mismatched collectives: rank " + std::to_string(k) + " called " + describe(expect) +
                  " but rank " + std::to_string(i) + " called " + describe(got) +
                  "; the two ends of each pair must agree on its size (output_splits and input_splits)");
    }
  shm_->all_to_all(out, out_at, in, in_at, largest, d);
}

}  // namespace engine::dist
