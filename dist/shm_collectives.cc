// The collectives other than all_reduce among the ranks of one machine, through the staging
// buffers of the shared segment (shm_allreduce.h): no sockets, no kernel copies.
//
// Each goes a chunk at a time: the ranks that hold data copy it into a buffer, one barrier,
// and each rank takes what it needs straight from the buffers. A buffer is written by its
// own rank, except in scatter and all_to_all, where a sender writes into its receiver's
// buffer (into a slot of its own in all_to_all) and the receiver writes none. Chunks
// alternate between the buffers' two halves, so a rank writes a half again only after the
// next chunk's barrier, which every rank reaches only when it has read the half: one
// barrier per chunk.
#include <algorithm>
#include <cstring>
#include <vector>

#include "dist/reduce_ranks.h"
#include "dist/shm_allreduce.h"

namespace engine::dist {

int ShmAllReduce::next_half() {
  const int h = int(half_);
  half_ ^= 1u;
  return h;
}

void ShmAllReduce::all_gather(char* out, const char* mine, size_t bytes, Deadline deadline) {
  std::vector<char*> blocks(static_cast<size_t>(size_));
  for (int r = 0; r < size_; ++r) blocks[size_t(r)] = out + size_t(r) * bytes;
  all_gather(blocks, mine, bytes, deadline);
}

void ShmAllReduce::all_gather(const std::vector<char*>& blocks, const char* mine, size_t bytes, Deadline deadline) {
  char* own = blocks[size_t(rank_)];
  if (bytes > 0 && own != mine) std::memmove(own, mine, bytes);  // mine may be that block already
  for (size_t start = 0; start < bytes; start += chunk_) {
    const size_t n = std::min(chunk_, bytes - start);
    const int h = next_half();
    std::memcpy(buffer(rank_, h), own + start, n);
    barrier(deadline);
    for (int r = 0; r < size_; ++r)
      if (r != rank_) std::memcpy(blocks[size_t(r)] + start, buffer(r, h), n);
  }
}

void ShmAllReduce::reduce_scatter(char* out, const char* in, int64_t m, DType dtype, ReduceOp op, Deadline deadline) {
  // A chunk takes the same stretch [start, start + n) of every block: a rank stages the
  // stretches of the blocks the others own (slot k of its buffer for block k), and reduces
  // its own block's stretch from its input and the others' slots, in rank order.
  const size_t es = dtype_size(dtype);
  const int64_t slot = int64_t(chunk_ / es) / size_;
  for (int64_t start = 0; start < m; start += slot) {
    const int64_t n = std::min(slot, m - start);
    const int h = next_half();
    for (int k = 0; k < size_; ++k)
      if (k != rank_)
        std::memcpy(buffer(rank_, h) + size_t(k * slot) * es, in + size_t(k * m + start) * es, size_t(n) * es);
    barrier(deadline);
    std::vector<const char*> from;
    for (int r = 0; r < size_; ++r)
      from.push_back(r == rank_ ? in + size_t(rank_ * m + start) * es : buffer(r, h) + size_t(rank_ * slot) * es);
    reduce_ranks(dtype, from, {out + size_t(start) * es}, n, op);
  }
}

void ShmAllReduce::broadcast(char* data, size_t bytes, int root, Deadline deadline) {
  for (size_t start = 0; start < bytes; start += chunk_) {
    const size_t n = std::min(chunk_, bytes - start);
    const int h = next_half();
    if (rank_ == root) std::memcpy(buffer(root, h), data + start, n);
    barrier(deadline);
    if (rank_ != root) std::memcpy(data + start, buffer(root, h), n);
  }
}

void ShmAllReduce::gather(const std::vector<char*>& outs, const char* mine, size_t bytes, int root, Deadline deadline) {
  if (rank_ == root && bytes > 0 && outs[size_t(root)] != mine) std::memmove(outs[size_t(root)], mine, bytes);
  for (size_t start = 0; start < bytes; start += chunk_) {
    const size_t n = std::min(chunk_, bytes - start);
    const int h = next_half();
    if (rank_ != root) std::memcpy(buffer(rank_, h), mine + start, n);
    barrier(deadline);
    for (int r = 0; r < size_ && rank_ == root; ++r)
      if (r != root) std::memcpy(outs[size_t(r)] + start, buffer(r, h), n);
  }
}

void ShmAllReduce::scatter(char* out, const std::vector<const char*>& ins, size_t bytes, int root, Deadline deadline) {
  if (rank_ == root && bytes > 0 && ins[size_t(root)] != out) std::memmove(out, ins[size_t(root)], bytes);
  for (size_t start = 0; start < bytes; start += chunk_) {
    const size_t n = std::min(chunk_, bytes - start);
    const int h = next_half();
    for (int r = 0; r < size_ && rank_ == root; ++r)  // each piece into its receiver's buffer
      if (r != root) std::memcpy(buffer(r, h), ins[size_t(r)] + start, n);
    barrier(deadline);
    if (rank_ != root) std::memcpy(out + start, buffer(rank_, h), n);
  }
}

void ShmAllReduce::all_to_all(char* out, const std::vector<size_t>& out_at, const char* in,
                              const std::vector<size_t>& in_at, size_t largest, Deadline deadline) {
  std::memcpy(out + out_at[size_t(rank_)], in + in_at[size_t(rank_)], in_at[size_t(rank_) + 1] - in_at[size_t(rank_)]);
  // Chunk by chunk, as many as the largest piece anywhere needs: rank i writes the stretch
  // of its piece for rank k into slot i of k's buffer; after the barrier k reads slot i.
  const size_t slot = chunk_ / size_t(size_);
  for (size_t start = 0; start < largest; start += slot) {
    const int h = next_half();
    auto stretch = [&](const std::vector<size_t>& at, int k) {  // [first byte, bytes) of this chunk
      const size_t len = at[size_t(k) + 1] - at[size_t(k)];
      return std::pair<size_t, size_t>{at[size_t(k)] + start, start < len ? std::min(slot, len - start) : 0};
    };
    for (int k = 0; k < size_; ++k) {
      const auto [from, n] = stretch(in_at, k);
      if (k != rank_ && n > 0) std::memcpy(buffer(k, h) + size_t(rank_) * slot, in + from, n);
    }
    barrier(deadline);
    for (int k = 0; k < size_; ++k) {
      const auto [to, n] = stretch(out_at, k);
      if (k != rank_ && n > 0) std::memcpy(out + to, buffer(rank_, h) + size_t(k) * slot, n);
    }
  }
}

}  // namespace engine::dist
