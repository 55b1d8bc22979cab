// The collectives other than all_reduce through shared memory (dist/shm_collectives.cc),
// with ranks as threads: closed-form results at sizes that span several chunks of the
// staging buffers, every op and dtype, outputs that are part of the inputs, and nothing
// sent on a socket.
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::run_threads;
using namespace engine::testing::closed_forms;

namespace {

// Element i of rank r's input(r, n), as float.
float given(int rank, int64_t i) { return float((rank + 1) * (i % 7 + 1)); }

// "" if block r of `all` (m elements each) holds input(r, m) for every r, else the first
// element that does not.
std::string check_gathered(const Tensor& all, int world, int64_t m) {
  const std::vector<float> v = all.to(DType::Float32).to_vector<float>();
  for (int r = 0; r < world; ++r)
    for (int64_t i = 0; i < m; ++i)
      if (v[size_t(r * m + i)] != given(r, i))
        return "block " + std::to_string(r) + " element " + std::to_string(i) + ": " +
               std::to_string(v[size_t(r * m + i)]) + ", want " + std::to_string(given(r, i));
  return "";
}

}  // namespace

// 262,144 floats fill one chunk (1 MiB): the large sizes take several, and reduce_scatter
// cuts each chunk into one slot per rank, so its chunks are smaller still.
TEST_CASE("shared memory all_gather, reduce_scatter, broadcast: closed forms over several chunks, no socket") {
  for (int world : {1, 2, 3, 5})
    for (int64_t m : {int64_t(0), int64_t(1), int64_t(7), int64_t(100003), int64_t(600001)}) {
      INFO("world " << world << " m " << m);
      run_threads(world, [world, m](ProcessGroupTCP& g) {
        const int r = g.rank();
        RANK_REQUIRE(g.uses_shared_memory() == (world > 1));
        const uint64_t before = g.bytes_sent();
        // all_gather into one tensor, and into a list.
        Tensor all = empty({world * m});
        g.all_gather_into_tensor(all, input(r, m)).wait();
        RANK_REQUIRE(check_gathered(all, world, m) == "");
        std::vector<Tensor> list;
        g.all_gather(&list, input(r, m)).wait();
        RANK_REQUIRE(int(list.size()) == world);
        for (int k = 0; k < world; ++k)
          RANK_REQUIRE(list[size_t(k)].to_vector<float>() == input(k, m).to_vector<float>());
        // reduce_scatter: rank r gets block r of the reduction of every rank's input(world * m),
        // element i being element r * m + i of the whole.
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
          if (op == ReduceOp::Product && m > 1023) continue;
          Tensor out = full({m}, -1.0);
          g.reduce_scatter(out, input(r, world * m), op).wait();
          const std::vector<float> v = out.to_vector<float>();
          for (int64_t i = 0; i < m; ++i) RANK_REQUIRE(v[size_t(i)] == float(closed_form(op, world, r * m + i)));
        }
        // broadcast from the last rank.
        Tensor b = input(r, m);
        g.broadcast(b, world - 1).wait();
        RANK_REQUIRE(b.to_vector<float>() == input(world - 1, m).to_vector<float>());
        RANK_REQUIRE(g.bytes_sent() == before);  // all of it through shared memory
      });
    }
}

TEST_CASE("shared memory reduce_scatter and all_gather of every dtype; outputs inside their inputs") {
  const int64_t m = 300007;  // two chunks of float32 slots at world 2, more at 3
  for (int world : {2, 3}) {
    for (DType dtype : {DType::Float32, DType::BFloat16, DType::Float16, DType::Int64}) {
      INFO("world " << world << " " << dtype_name(dtype));  // here: Catch's macros are for the main thread
      run_threads(world, [world, m, dtype](ProcessGroupTCP& g) {
        const int r = g.rank();
        // Sums of small integers are exact in every dtype.
        Tensor out = empty({m}, dtype);
        g.reduce_scatter(out, input(r, world * m, dtype), ReduceOp::Sum).wait();
        const std::vector<float> v = out.to(DType::Float32).to_vector<float>();
        for (int64_t i = 0; i < m; i += 1009)
          RANK_REQUIRE(v[size_t(i)] == float(closed_form(ReduceOp::Sum, world, r * m + i)));
        Tensor all = empty({world * m}, dtype);
        g.all_gather_into_tensor(all, input(r, m, dtype)).wait();
        RANK_REQUIRE(check_gathered(all, world, m) == "");
      });
    }
    run_threads(world, [world, m](ProcessGroupTCP& g) {
      const int r = g.rank();
      // In place: the input is this rank's block of the output (FSDP's flat parameter).
      Tensor all = zeros({world * m});
      Tensor mine = all.narrow(0, r * m, m);
      mine.copy_(input(r, m));
      g.all_gather_into_tensor(all, mine).wait();
      RANK_REQUIRE(check_gathered(all, world, m) == "");
      // The output is this rank's block of the input.
      Tensor whole = input(r, world * m);
      Tensor block = whole.narrow(0, r * m, m);
      g.reduce_scatter(block, whole, ReduceOp::Max).wait();
      const std::vector<float> v = block.to_vector<float>();
      for (int64_t i = 0; i < m; i += 1009)
        RANK_REQUIRE(v[size_t(i)] == float(closed_form(ReduceOp::Max, world, r * m + i)));
    });
  }
}

TEST_CASE("shared memory gather, scatter, reduce, all_to_all: closed forms over several chunks, no socket") {
  for (int world : {2, 3, 5})
    for (int64_t m : {int64_t(0), int64_t(7), int64_t(600001)}) {
      INFO("world " << world << " m " << m);
      run_threads(world, [world, m](ProcessGroupTCP& g) {
        const int r = g.rank(), root = world - 1;
        const uint64_t before = g.bytes_sent();
        // gather into contiguous outputs and into strided views (every other element).
        std::vector<Tensor> outs;
        for (int k = 0; k < world && r == root; ++k) outs.push_back(k % 2 ? zeros({m, 2}).select(1, 0) : zeros({m}));
        g.gather(&outs, input(r, m), root).wait();
        for (int k = 0; k < world && r == root; ++k)
          RANK_REQUIRE(outs[size_t(k)].to_vector<float>() == input(k, m).to_vector<float>());
        // scatter: rank k gets input(k, m) from the root.
        std::vector<Tensor> ins;
        for (int k = 0; k < world && r == 0; ++k) ins.push_back(input(k, m));
        Tensor got = full({m}, -1.0);
        g.scatter(got, ins, 0).wait();
        RANK_REQUIRE(got.to_vector<float>() == input(r, m).to_vector<float>());
        // reduce: the root gets the closed form, the others keep their input.
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
          Tensor t = input(r, m);
          g.reduce(t, root, op).wait();
          const std::vector<float> v = t.to_vector<float>();
          for (int64_t i = 0; i < m; ++i)
            RANK_REQUIRE(v[size_t(i)] == (r == root ? float(closed_form(op, world, i)) : given(r, i)));
        }
        // all_to_all, pieces of (i + k) % world + 1 blocks of m / 4 elements from rank i to
        // rank k: unequal, and at 600001 several chunks' slots each. Element j of the piece
        // from i to k is i * 1000 + k * 10 + j % 7, exact in float32.
        const int64_t unit = std::max<int64_t>(m / 4, 1);
        auto rows = [&](int i, int k) { return ((i + k) % world + 1) * unit; };
        std::vector<int64_t> in_splits, out_splits;
        std::vector<float> in;
        for (int k = 0; k < world; ++k) {
          in_splits.push_back(rows(r, k)), out_splits.push_back(rows(k, r));
          for (int64_t j = 0; j < rows(r, k); ++j) in.push_back(float(r * 1000 + k * 10 + j % 7));
        }
        int64_t total = 0;
        for (int64_t s : out_splits) total += s;
        Tensor out = full({total}, -1.0);
        g.all_to_all(out, from_vector(in, {int64_t(in.size())}), out_splits, in_splits).wait();
        const std::vector<float> v = out.to_vector<float>();
        size_t at = 0;
        for (int i = 0; i < world; ++i)
          for (int64_t j = 0; j < rows(i, r); ++j, ++at) RANK_REQUIRE(v[at] == float(i * 1000 + r * 10 + j % 7));
        RANK_REQUIRE(g.bytes_sent() == before);  // all of it through shared memory
      });
    }
}

TEST_CASE("shared memory reduce gives the root all_reduce's bits") {
  // Values whose float32 sums round: the order of the adds shows in the bits.
  const int world = 3;
  const int64_t n = 400009;
  run_threads(world, [n](ProcessGroupTCP& g) {
    std::vector<float> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[size_t(i)] = 1.0f / float(i % 97 + 1) + float(g.rank()) * 1e-3f * float(i % 13);
    Tensor reduced = from_vector(v, {n}), all = from_vector(v, {n});
    g.reduce(reduced, 1, ReduceOp::Avg).wait();
    g.all_reduce(all, ReduceOp::Avg).wait();
    if (g.rank() == 1) RANK_REQUIRE(reduced.to_vector<float>() == all.to_vector<float>());
  });
}
