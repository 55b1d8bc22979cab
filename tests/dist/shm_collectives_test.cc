// all_gather, reduce_scatter and broadcast through shared memory (dist/shm_collectives.cc),
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
