// all_gather, reduce_scatter and broadcast for a job on several machines with several ranks
// on some: shared memory within each machine, and only one leader per machine on the
// network, as the hierarchical all-reduce (allreduce_hierarchical.cc).
//
// What it saves is link bytes. With n ranks on m machines, a flat ring all-gather sends
// (n-1)/n of the result over each machine's link; here only the leaders' ring crosses
// machines, sending (m-1)/m of it: 3/4 -> 1/2 for 2 machines x 2 ranks, 15/16 -> 1/2 for
// 2 x 8. reduce_scatter is the mirror image. A flat broadcast sends one copy to every rank
// off the root's machine; here one copy per machine.
//
// The blocks are laid out in machine order (machine 0's ranks, then machine 1's, ...), so
// each machine's blocks are one segment of the leaders' ring. Where ranks are numbered
// machine by machine (as the launcher numbers them) that is the ranks' own order and the
// result is built in place.
#include <cstring>
#include <vector>

#include "dist/reduce_into.h"
#include "dist/tcp_group.h"

namespace engine::dist {

bool ProcessGroupTCP::machine_order_is_rank_order() const {
  for (int r = 0; r < size_; ++r)
    if (block_at_[size_t(r)] != r) return false;
  return true;
}

namespace {
// memmove, but for empty blocks (whose tensors may have no storage: memmove and memcpy
// must not be given a null pointer even for 0 bytes).
void move_bytes(char* dst, const char* src, size_t n) {
  if (n > 0) std::memmove(dst, src, n);
}

// Segment k of the leaders' ring: machine k's blocks of m elements.
std::vector<int64_t> machine_bounds(const std::vector<int>& machine_start, int64_t m) {
  std::vector<int64_t> bounds(machine_start.size());
  for (size_t k = 0; k < bounds.size(); ++k) bounds[k] = int64_t(machine_start[k]) * m;
  return bounds;
}
}  // namespace

void ProcessGroupTCP::hierarchical_all_gather(char* out, const char* mine, int64_t m, DType dtype,
                                              const MessageHeader& desc, Deadline d) {
  const size_t es = dtype_size(dtype), block = size_t(m) * es;
  const int k = machine_of_[size_t(rank_)];
  const bool leader = rank_ == leaders_[size_t(k)];
  const bool in_place = machine_order_is_rank_order();
  std::vector<char> staging(in_place ? 0 : size_t(size_) * block);
  char* buf = in_place ? out : staging.data();
  // 1. Within the machine: each rank puts its block in place (moved: it may already be
  //    there) and zeros around it, and the machine's segment is summed in shared memory.
  const int64_t first = machine_start_[size_t(k)], mine_at = block_at_[size_t(rank_)];
  const int64_t local = int64_t(local_ranks_.size());
  move_bytes(buf + size_t(mine_at) * block, mine, block);
  fill_additive_identity(buf + size_t(first) * block, (mine_at - first) * m, dtype);
  fill_additive_identity(buf + size_t(mine_at + 1) * block, (first + local - mine_at - 1) * m, dtype);
  if (shm_) {
    if (in_place) shm_->barrier(d);  // the output may be memory the ranks share: all written first
    shm_->all_reduce(buf + size_t(first) * block, local * m, dtype, ReduceOp::Sum, d);
  }
  // 2. Between machines: the leaders' ring passes each machine's segment to the others.
  if (leader && leaders_.size() > 1)
    ring_all_gather(Ring{leaders_, k}, buf, machine_bounds(machine_start_, m), dtype, desc, /*owned_shift=*/-1, d);
  // 3. The other machines' blocks, from the leader to its machine's other ranks (this
  //    machine's own they all hold since step 1).
  share_within_machine(buf, first * m, dtype, leader, d);
  share_within_machine(buf + size_t(first + local) * block, (size_ - first - local) * m, dtype, leader, d);
  if (!in_place)
    for (int r = 0; r < size_; ++r)
      move_bytes(out + size_t(r) * block, buf + size_t(block_at_[size_t(r)]) * block, block);
}

void ProcessGroupTCP::hierarchical_reduce_scatter(char* mine, const char* in, int64_t m, DType dtype, ReduceOp op,
                                                  const MessageHeader& desc, Deadline d) {
  const size_t es = dtype_size(dtype), block = size_t(m) * es;
  const ReduceOp combine = op == ReduceOp::Avg ? ReduceOp::Sum : op;  // Avg divides once, at the end
  const int k = machine_of_[size_t(rank_)];
  const bool leader = rank_ == leaders_[size_t(k)];
  std::vector<char> work(size_t(size_) * block);  // the input in machine order (the caller's stays intact)
  for (int r = 0; r < size_; ++r)
    move_bytes(work.data() + size_t(block_at_[size_t(r)]) * block, in + size_t(r) * block, block);
  // 1. Within the machine: every block reduced over the machine's ranks.
  if (shm_) shm_->all_reduce(work.data(), int64_t(size_) * m, dtype, combine, d);
  // 2. Between machines: the leaders' ring reduce-scatter leaves leader k with machine k's
  //    blocks reduced over every rank (shift -1: position k ends owning segment k).
  if (leader && leaders_.size() > 1)
    ring_reduce_scatter(Ring{leaders_, k}, work.data(), machine_bounds(machine_start_, m), dtype, combine, desc, -1, d);
  // 3. The leader's finished segment to its machine's other ranks; each keeps its block.
  share_within_machine(work.data() + size_t(machine_start_[size_t(k)]) * block, int64_t(local_ranks_.size()) * m, dtype,
                       leader, d);
  move_bytes(mine, work.data() + size_t(block_at_[size_t(rank_)]) * block, block);
  if (op == ReduceOp::Avg) divide_by(mine, m, dtype, size_);
}

void ProcessGroupTCP::hierarchical_broadcast(char* data, int64_t count, DType dtype, int root,
                                             const MessageHeader& desc, Deadline d) {
  // On the root's machine the root shares its data; on every other machine the leader
  // receives one copy from the root, shares it, and acknowledges with its own description
  // of the call (so a root whose peers called something else does not return normally).
  const int k = machine_of_[size_t(rank_)], root_machine = machine_of_[size_t(root)];
  const bool source = k == root_machine ? rank_ == root : rank_ == leaders_[size_t(k)];
  MessageHeader h = desc, ack = desc;
  h.bytes = size_t(count) * dtype_size(dtype);
  ack.step = 1;
  if (rank_ == root) {
    for (size_t j = 0; j < leaders_.size(); ++j)
      if (int(j) != root_machine) send_message(leaders_[j], h, data, d);
  } else if (source) {
    recv_message(root, h, data, d);
  }
  share_within_machine(data, count, dtype, source, d);
  if (rank_ == root) {
    for (size_t j = 0; j < leaders_.size(); ++j)
      if (int(j) != root_machine) recv_message(leaders_[j], ack, nullptr, d);
  } else if (source) {
    send_message(root, ack, nullptr, d);
  }
}

}  // namespace engine::dist
