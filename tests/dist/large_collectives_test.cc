// Collectives that must not copy what they are given: the TCP ring receives into a window
// of TCPGroupOptions::ring_window_bytes however large the tensor, reduce_scatter and reduce
// leave their inputs as they were without cloning them, and all_gather gathers straight into
// its outputs. Checked against closed forms with a tiny window (so that it wraps many times
// within one segment), and by the peak memory (VmHWM) a collective of 64 MiB adds.
#include <string>

#include "catch2/catch.hpp"
#include "tensor/cpu_allocator.h"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"
#include "tests/testing/memory_use.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::reset_peak_rss;
using engine::testing::run_threads_with;
using engine::testing::status_kb;
using namespace engine::testing::closed_forms;

namespace {

// The ring with a window of `window` bytes, reducing every `chunk` bytes received (24: not a
// whole number of 8-byte elements, so a report may end inside one).
auto ring_with_window(size_t window, size_t chunk = 24) {
  return [window, chunk](int, TCPGroupOptions& o) {
    o.shared_memory = false;
    o.ring_window_bytes = window;
    o.chunk_bytes = chunk;
  };
}

bool same_values(const Tensor& a, const Tensor& b) { return a.to_vector<float>() == b.to_vector<float>(); }

// Rank r's reduce_scatter input: block k, element i = r * 100 + k * 10 + i % 5.
Tensor blocks(int rank, int world, int64_t m) {
  Tensor t = empty({int64_t(world) * m});
  float* p = t.data<float>();
  for (int k = 0; k < world; ++k)
    for (int64_t i = 0; i < m; ++i) p[k * m + i] = float(rank * 100 + k * 10 + i % 5);
  return t;
}

// Element i of block k summed over the ranks.
float block_sum(int world, int k, int64_t i) { return float(100 * world * (world - 1) / 2 + world * (k * 10 + i % 5)); }

}  // namespace

TEST_CASE(
    "the ring's receive window wraps: every op in float32, bfloat16 and float16 (and int64 sums), the bits of a whole "
    "buffer") {
  for (int world : {2, 3, 4})
    for (int64_t n : {0, 1, 7, 100, 10007})
      for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16}) {
        // {window, chunk}: reduced every 24 bytes; only when the window is full (chunks larger
        // than it); and a window larger than the tensor, whose results the others must equal.
        const std::vector<std::pair<size_t, size_t>> settings = {{64, 24}, {64, 4096}, {size_t(1) << 30, 64 << 10}};
        std::vector<std::vector<std::vector<float>>> sums(settings.size());
        for (size_t s = 0; s < settings.size(); ++s) {
          sums[s].resize(size_t(world));
          run_threads_with(world, ring_with_window(settings[s].first, settings[s].second), [&](ProcessGroupTCP& g) {
            RANK_REQUIRE(g.all_reduce_algorithm() == "ring");
            const std::string why = check_every_op(g, n, &sums[s][size_t(g.rank())], dtype);
            RANK_REQUIRE(why == "");
            const int64_t big = int64_t(1) << 40;  // int64: 8-byte elements
            Tensor t = full({n}, double(big) * (g.rank() + 1), DType::Int64);
            g.all_reduce(t).wait();
            for (int64_t i = 0; i < n; ++i) RANK_REQUIRE(t.data<int64_t>()[i] == big * world * (world + 1) / 2);
          });
        }
        for (size_t s = 0; s + 1 < settings.size(); ++s) REQUIRE(sums[s] == sums.back());
      }
}

TEST_CASE("reduce_scatter and reduce on the ring leave their inputs as they were") {
  for (int world : {1, 2, 3, 4})
    for (int64_t m : {1, 9, 1000}) {
      run_threads_with(world, ring_with_window(64), [world, m](ProcessGroupTCP& g) {
        const int r = g.rank();
        const Tensor in = blocks(r, world, m), before = in.clone();
        Tensor out = empty({m});
        g.reduce_scatter(out, in, ReduceOp::Sum).wait();
        RANK_REQUIRE(same_values(in, before));
        for (int64_t i = 0; i < m; ++i) RANK_REQUIRE(out.data<float>()[i] == block_sum(world, r, i));
        g.reduce_scatter(out, in, ReduceOp::Avg).wait();
        RANK_REQUIRE(same_values(in, before));
        RANK_REQUIRE(out.data<float>()[m - 1] == block_sum(world, r, m - 1) / float(world));
        // Into this rank's own block of the input (FSDP's flat gradient): the others stay.
        Tensor own = in.clone();
        g.reduce_scatter(own.narrow(0, r * m, m), own, ReduceOp::Sum).wait();
        for (int k = 0; k < world; ++k)
          for (int64_t i = 0; i < m; ++i)
            RANK_REQUIRE(own.data<float>()[k * m + i] ==
                         (k == r ? block_sum(world, r, i) : before.data<float>()[k * m + i]));
        // Into another block of the input: the result there, computed from the input as given.
        if (world > 1) {
          Tensor other = in.clone();
          const int k = (r + 1) % world;
          g.reduce_scatter(other.narrow(0, k * m, m), other, ReduceOp::Sum).wait();
          for (int64_t i = 0; i < m; ++i) RANK_REQUIRE(other.data<float>()[k * m + i] == block_sum(world, r, i));
        }
        // reduce: only dst's tensor changes.
        const int dst = world - 1;
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
          Tensor t = in.clone();
          g.reduce(t, dst, op).wait();
          if (r != dst) {
            RANK_REQUIRE(same_values(t, before));
            continue;
          }
          for (int k = 0; k < world; ++k)
            for (int64_t i = 0; i < m; ++i) {
              const float sum = block_sum(world, k, i), top = float((world - 1) * 100 + k * 10 + i % 5);
              const float want = op == ReduceOp::Sum ? sum : op == ReduceOp::Avg ? sum / float(world) : top;
              RANK_REQUIRE(t.data<float>()[k * m + i] == want);
            }
        }
      });
    }
}

TEST_CASE("all_gather into given tensors, each where it lies, from inside them too") {
  for (bool shm : {false, true})
    for (int world : {1, 2, 3}) {
      run_threads_with(
          world, [shm](int, TCPGroupOptions& o) { o.shared_memory = shm, o.ring_window_bytes = 64; },
          [world](ProcessGroupTCP& g) {
            const int r = g.rank();
            for (int from : {r, (r + 1) % world}) {  // its own row, and another rank's
              Tensor rows = zeros({world, 5});
              std::vector<Tensor> views, apart;
              for (int k = 0; k < world; ++k) views.push_back(rows.select(0, k)), apart.push_back(zeros({5}));
              rows.select(0, from).fill_(double(r + 1));
              g.all_gather(&views, rows.select(0, from)).wait();
              for (int k = 0; k < world; ++k) RANK_REQUIRE(rows.at({k, 4}) == k + 1);
              // Tensors of their own (PyTorch's [torch.empty(5) for _ in range(world)]).
              apart[size_t(from)].fill_(double(r + 1));
              g.all_gather(&apart, apart[size_t(from)]).wait();
              for (int k = 0; k < world; ++k) RANK_REQUIRE(apart[size_t(k)].at({0}) == k + 1);
            }
            // An input across two blocks: read before either is written.
            Tensor flat = zeros({world * 5 + 2});
            std::vector<Tensor> blocks;
            for (int k = 0; k < world; ++k) blocks.push_back(flat.narrow(0, 5 * k, 5));
            flat.narrow(0, 2, 5).fill_(double(r + 1));
            g.all_gather(&blocks, flat.narrow(0, 2, 5)).wait();
            for (int k = 0; k < world; ++k) RANK_REQUIRE((flat.at({5 * k}) == k + 1 && flat.at({5 * k + 4}) == k + 1));
            // An empty list is filled with views of one new tensor, one after another.
            std::vector<Tensor> made;
            g.all_gather(&made, full({2, 3}, double(r + 1))).wait();
            for (int k = 0; k < world; ++k) {
              RANK_REQUIRE(made[size_t(k)].shape() == Shape{2, 3});
              RANK_REQUIRE(made[size_t(k)].at({1, 2}) == k + 1);
              RANK_REQUIRE(made[size_t(k)].bytes() == made[0].bytes() + size_t(k) * 6 * sizeof(float));
            }
          });
    }
}

TEST_CASE("a collective of 64 MiB adds no copy of its tensor to a rank's memory") {
  if (!reset_peak_rss()) {
    WARN("SKIPPED: /proc/self/clear_refs cannot be written here, so the peak memory cannot be measured");
    return;
  }
  const int64_t m = int64_t(16) << 20;  // floats per rank's tensor: 64 MiB
  const int64_t mib = 1 << 20;
  // The slack: the window (4 MiB) and shared memory's staging on each of the 2 ranks, and
  // (under ASan) the shadow of what a call writes and its allocator's own: up to 53 MiB for
  // a reduce that needs 32. A copy of the tensor is 64 MiB a rank.
  const auto bound = [&](int64_t result_bytes) { return result_bytes + result_bytes / 8 + 24 * mib; };
  for (bool shm : {false, true})
    for (const std::string what : {"all_reduce", "reduce_scatter", "reduce", "all_gather", "all_gather list"}) {
      int64_t grew = -1, allowed = 0;
      run_threads_with(
          2, [shm](int, TCPGroupOptions& o) { o.shared_memory = shm; },
          [&](ProcessGroupTCP& g) {
            const int r = g.rank();
            Tensor in = full({what == "reduce_scatter" ? 2 * m : m}, double(r + 1)), out = zeros({m});
            std::vector<Tensor> list = {zeros({m}), zeros({m})}, made;
            const auto run = [&](int64_t n) {
              if (what == "all_reduce") g.all_reduce(in.narrow(0, 0, n)).wait();
              if (what == "reduce_scatter") g.reduce_scatter(out.narrow(0, 0, n), in.narrow(0, 0, 2 * n)).wait();
              if (what == "reduce") g.reduce(in.narrow(0, 0, n), 1).wait();
              if (what == "all_gather") made.clear(), g.all_gather(&made, in.narrow(0, 0, n)).wait();
              if (what == "all_gather list") {  // PyTorch's usual [torch.empty(m) for _ in range(2)]
                std::vector<Tensor> part = {list[0].narrow(0, 0, n), list[1].narrow(0, 0, n)};
                g.all_gather(&part, in.narrow(0, 0, n)).wait();
              }
            };
            run(1 << 20);  // first touches of the window and the staging buffers
            made.clear();
            g.barrier().wait();
            if (r == 0) cpu_empty_cache(), reset_peak_rss();  // blocks freed earlier would hide new ones
            const int64_t base = status_kb("VmRSS:") * 1024;
            g.barrier().wait();
            run(m);
            g.barrier().wait();
            if (r == 0) {
              grew = status_kb("VmHWM:") * 1024 - base;
              // What the call returns that was not there before: all_gather's new tensors (two
              // ranks x two blocks); reduce: rank 0's finished half, sent to rank 1 from a
              // buffer of its own.
              const int64_t bytes = m * 4;
              allowed = bound(what == "all_gather" ? 4 * bytes : what == "reduce" && !shm ? bytes / 2 : 0);
            }
          },
          std::chrono::seconds(60));
      INFO(what << (shm ? " in shared memory" : " on the TCP ring") << ": the peak grew by " << grew / mib
                << " MiB, allowed " << allowed / mib << " MiB");
      CHECK(grew > -mib);  // measured (the kernel's counts of resident pages lag by a few pages)
      CHECK(grew <= allowed);
    }
}
