// gather, scatter, reduce and all_to_all against their closed forms, for world 1-4, every
// root, every op, equal and unequal pieces; bad arguments and mismatched calls named.
#include <functional>
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/tcp_group.h"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
namespace cf = engine::testing::closed_forms;

namespace {
// Every test runs twice (GENERATE): with ranks sharing memory, the path on one machine
// (these threads are one), and over sockets, the path between machines.
bool through_shared_memory = true;

void run_threads(int world, const std::function<void(ProcessGroupTCP&)>& fn,
                 std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  engine::testing::run_threads(world, fn, timeout, through_shared_memory);
}

// all_to_all where rank i sends rows(i, j) values to rank j, value k of that piece
// labelled 1e6 i + 2e5 j + k: distinct for k < 2e5, and exact in float32.
using Rows = std::function<int64_t(int, int)>;
float piece_value(int i, int j, int64_t k) { return float(1e6 * i + 2e5 * j + double(k)); }
std::vector<float> sent_by(int me, int world, const Rows& rows) {  // rank me's input: its pieces in rank order
  std::vector<float> v;
  for (int j = 0; j < world; ++j)
    for (int64_t k = 0; k < rows(me, j); ++k) v.push_back(piece_value(me, j, k));
  return v;
}
std::vector<float> received_by(int me, int world, const Rows& rows) {  // what rank me must end with
  std::vector<float> v;
  for (int i = 0; i < world; ++i)
    for (int64_t k = 0; k < rows(i, me); ++k) v.push_back(piece_value(i, me, k));
  return v;
}
std::vector<int64_t> splits(int me, int world, const Rows& rows, bool input) {
  std::vector<int64_t> s;
  for (int k = 0; k < world; ++k) s.push_back(input ? rows(me, k) : rows(k, me));
  return s;
}

// Rank r's values r * 100 + i: every element says where it came from.
Tensor labelled(int rank, int64_t n, int64_t first = 0) {
  std::vector<float> v;
  for (int64_t i = 0; i < n; ++i) v.push_back(float(rank * 100 + first + i));
  return from_vector(v, {n});
}
}  // namespace

TEST_CASE("gather: dst holds every rank's input, in rank order") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  for (int world : {1, 2, 3, 4})
    for (int dst = 0; dst < world; ++dst) {
      INFO("world " << world << " dst " << dst);
      std::vector<std::string> problems(static_cast<size_t>(world));
      run_threads(world, [&](ProcessGroupTCP& g) {
        std::vector<Tensor> out;
        g.gather(&out, labelled(g.rank(), 5), dst).wait();
        std::string& p = problems[size_t(g.rank())];
        if (g.rank() != dst) {
          if (!out.empty()) p = "a rank other than dst got outputs";
          return;
        }
        if (int(out.size()) != world) p = "dst got " + std::to_string(out.size()) + " outputs";
        for (int r = 0; r < world && p.empty(); ++r)
          if (out[size_t(r)].to_vector<float>() != labelled(r, 5).to_vector<float>()) p = "output " + std::to_string(r);
      });
      for (auto& p : problems) CHECK(p == "");
    }
  // Ranks other than dst may pass no list at all (PyTorch's gather_list=None); dst may not.
  std::vector<std::string> got(3);
  run_threads(3, [&](ProcessGroupTCP& g) {
    std::vector<Tensor> out;
    g.gather(g.rank() == 1 ? &out : nullptr, labelled(g.rank(), 2), 1).wait();
    for (const Tensor& t : out) got[size_t(g.rank())] += std::to_string(int(t.at({0}))) + " ";
    if (g.rank() == 0)
      RANK_REQUIRE_THROWS_WITH(g.gather(nullptr, zeros({2}), 0),
                               Catch::Contains("outputs is null on the destination rank 0"));
  });
  CHECK(got == std::vector<std::string>{"", "0 100 200 ", ""});
}

TEST_CASE("scatter: rank r gets src's inputs[r]") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  for (int world : {1, 2, 3, 4})
    for (int src = 0; src < world; ++src) {
      INFO("world " << world << " src " << src);
      std::vector<std::vector<float>> got(static_cast<size_t>(world));
      run_threads(world, [&](ProcessGroupTCP& g) {
        std::vector<Tensor> inputs;
        if (g.rank() == src)
          for (int r = 0; r < world; ++r) inputs.push_back(labelled(r, 3, 10));
        Tensor out = zeros({3});
        g.scatter(out, inputs, src).wait();
        got[size_t(g.rank())] = out.to_vector<float>();
      });
      for (int r = 0; r < world; ++r) CHECK(got[size_t(r)] == labelled(r, 3, 10).to_vector<float>());
    }
}

TEST_CASE("reduce: dst holds op over every rank; the others keep their tensor") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  for (int world : {1, 2, 3, 4})
    for (int64_t n : {int64_t(1), int64_t(3), int64_t(1000)})
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
        INFO("world " << world << " n " << n << " op " << reduce_op_name(op));
        const int dst = world - 1;
        std::vector<std::vector<float>> got(static_cast<size_t>(world));
        run_threads(world, [&](ProcessGroupTCP& g) {
          Tensor t = cf::input(g.rank(), n);
          g.reduce(t, dst, op).wait();
          got[size_t(g.rank())] = t.to_vector<float>();
        });
        for (int r = 0; r < world; ++r)
          for (int64_t i = 0; i < n; ++i) {
            const double want = r == dst ? cf::closed_form(op, world, i) : double((r + 1) * (i % 7 + 1));
            REQUIRE(std::abs(got[size_t(r)][size_t(i)] - want) <= 1e-6 * std::abs(want));
          }
      }
}

TEST_CASE("reduce of bfloat16 and float16, AVG included; AVG of int64 is refused by name") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  for (DType h : {DType::BFloat16, DType::Float16})
    for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Max}) {
      INFO(dtype_name(h) << " " << reduce_op_name(op));
      std::vector<float> got;
      run_threads(3, [&](ProcessGroupTCP& g) {
        Tensor t = cf::input(g.rank(), 100, h);
        g.reduce(t, 0, op).wait();
        RANK_REQUIRE(t.dtype() == h);
        if (g.rank() == 0) got = t.to(DType::Float32).to_vector<float>();
      });
      for (int64_t i = 0; i < 100; ++i) {
        const double want = cf::closed_form(op, 3, i);  // Avg: (i % 7 + 1) * 2, exact in 16 bits
        REQUIRE(got[size_t(i)] == want);
      }
    }
  run_threads(2, [](ProcessGroupTCP& g) {
    Tensor t = cf::input(g.rank(), 4, DType::Int64);
    RANK_REQUIRE_THROWS_WITH(g.reduce(t, 0, ReduceOp::Avg),
                             Catch::Contains("[reduce] AVG needs a floating-point tensor, got int64"));
  });
}

TEST_CASE("reduce over sockets sends (n-1)/n of the tensor from each rank, not n-1 copies into dst") {
  through_shared_memory = false;  // through shared memory it sends nothing (shm_collectives_test)
  std::vector<uint64_t> sent(4);
  run_threads(4, [&](ProcessGroupTCP& g) {
    Tensor t = cf::input(g.rank(), 4000);
    const uint64_t before = g.bytes_sent();
    g.reduce(t, 0).wait();
    sent[size_t(g.rank())] = g.bytes_sent() - before;
  });
  // Reduce-scatter: 3 messages of 1000 floats; then ranks 1-3 send their 1000 to rank 0.
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const uint64_t payload = (r == 0 ? 3 : 4) * 4000;
    CHECK(sent[size_t(r)] >= payload);
    CHECK(sent[size_t(r)] <= payload + 4 * 48);
  }
}

TEST_CASE("all_to_all: piece j of rank i lands as piece i of rank j") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  for (int world : {1, 2, 3, 4}) {
    INFO("world " << world);
    std::vector<std::vector<float>> got(static_cast<size_t>(world));
    run_threads(world, [&](ProcessGroupTCP& g) {
      // Equal pieces of 2 rows x 3 columns: rank i's row k holds i * 100 + k.
      std::vector<float> v;
      for (int k = 0; k < 2 * world; ++k)
        for (int c = 0; c < 3; ++c) v.push_back(float(g.rank() * 100 + k));
      Tensor in = from_vector(v, {2 * int64_t(world), 3}), out = zeros({2 * int64_t(world), 3});
      g.all_to_all(out, in).wait();
      got[size_t(g.rank())] = out.to_vector<float>();
    });
    for (int j = 0; j < world; ++j)
      for (int i = 0; i < world; ++i)
        for (int k = 0; k < 2; ++k)  // output row 2i + k of rank j = rank i's row 2j + k
          REQUIRE(got[size_t(j)][size_t((2 * i + k) * 3)] == float(i * 100 + 2 * j + k));
  }
}

TEST_CASE("all_to_all with unequal pieces (splits), empty ones included") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  const int world = 3;
  // Rank i sends (i + j) % 3 rows to rank j; rank j receives (i + j) % 3 rows from rank i.
  const Rows rows = [](int i, int j) { return int64_t((i + j) % 3); };
  std::vector<std::vector<float>> got(static_cast<size_t>(world));
  run_threads(world, [&](ProcessGroupTCP& g) {
    const int me = g.rank();
    const std::vector<int64_t> out_splits = splits(me, world, rows, false);
    int64_t total = 0;
    for (auto s : out_splits) total += s;
    Tensor in = from_vector(sent_by(me, world, rows)), out = zeros({total});
    g.all_to_all(out, in, out_splits, splits(me, world, rows, true)).wait();
    got[size_t(me)] = out.to_vector<float>();
  });
  for (int j = 0; j < world; ++j) CHECK(got[size_t(j)] == received_by(j, world, rows));
}

TEST_CASE("an output that shares memory with the input is written only after the input is read") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  const int world = 3;
  for (int64_t n : {int64_t(2), int64_t(50000)}) {  // one chunk, and several
    INFO("rows " << n);
    // all_to_all in place (output = input). (2i + j) % 3 makes the output's pieces start
    // elsewhere than the input's.
    for (bool even : {true, false}) {
      const Rows rows = [&](int i, int j) { return even ? n : n * ((2 * i + j) % 3 + 1); };
      std::vector<std::vector<float>> got(size_t(world), std::vector<float>{});
      run_threads(world, [&](ProcessGroupTCP& g) {
        const int me = g.rank();
        Tensor t = from_vector(sent_by(me, world, rows));
        g.all_to_all(t, t, splits(me, world, rows, false), splits(me, world, rows, true)).wait();
        got[size_t(me)] = t.to_vector<float>();
      });
      for (int j = 0; j < world; ++j) {
        INFO("all_to_all in place, " << (even ? "equal" : "unequal") << " pieces, rank " << j);
        CHECK(got[size_t(j)] == received_by(j, world, rows));
      }
    }
    // scatter whose root's output is one of its inputs, and gather whose root's input is
    // one of its outputs, for every root and slot.
    for (int root = 0; root < world; ++root)
      for (int slot = 0; slot < world; ++slot) {
        if (slot == root) continue;
        INFO("root " << root << ", the input in slot " << slot);
        std::vector<std::vector<float>> scattered(size_t(world), std::vector<float>{}),
            gathered(size_t(world), std::vector<float>{});
        run_threads(world, [&](ProcessGroupTCP& g) {
          const int me = g.rank();
          std::vector<Tensor> inputs;
          for (int r = 0; r < world && me == root; ++r) inputs.push_back(labelled(r, n, 10));
          Tensor out = me == root ? inputs[size_t(slot)] : zeros({n});
          g.scatter(out, inputs, root).wait();
          scattered[size_t(me)] = out.to_vector<float>();
          Tensor mine = labelled(me, n);
          std::vector<Tensor> outs;
          for (int r = 0; r < world && me == root; ++r) outs.push_back(r == slot ? mine : zeros({n}));
          g.gather(&outs, mine, root).wait();
          for (const Tensor& o : outs) {
            const std::vector<float> v = o.to_vector<float>();
            gathered[size_t(me)].insert(gathered[size_t(me)].end(), v.begin(), v.end());
          }
        });
        std::vector<float> all;
        for (int r = 0; r < world; ++r) {
          CHECK(scattered[size_t(r)] == labelled(r, n, 10).to_vector<float>());
          const std::vector<float> v = labelled(r, n).to_vector<float>();
          all.insert(all.end(), v.begin(), v.end());
        }
        CHECK(gathered[size_t(root)] == all);
      }
  }
}

TEST_CASE("bad arguments are named; a split the sender and receiver disagree on is a mismatch") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  run_threads(1, [](ProcessGroupTCP& g) {
    std::vector<Tensor> out;
    RANK_REQUIRE_THROWS_WITH(g.gather(&out, zeros({2}), 3), Catch::Contains("[gather] root 3 is outside 0..0"));
    Tensor o = zeros({2});
    RANK_REQUIRE_THROWS_WITH(g.scatter(o, {}, 0), Catch::Contains("[scatter] src 0 gave 0 inputs"));
    RANK_REQUIRE_THROWS_WITH(g.scatter(o, {zeros({3})}, 0), Catch::Contains("inputs[0] must have the output's shape"));
    RANK_REQUIRE_THROWS_WITH(g.all_to_all(zeros({4}), zeros({4}), {}, {1, 2}),
                             Catch::Contains("input_splits has 2 entries; the world size is 1"));
    RANK_REQUIRE_THROWS_WITH(g.all_to_all(zeros({4}), zeros({4}), {}, {3}),
                             Catch::Contains("input_splits add up to 3 rows, but input has 4"));
  });
  std::vector<std::string> errors(2);
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        // Rank 0 sends 1 row to rank 1, which expects 2.
        const std::vector<int64_t> in_splits{1, 1};
        const std::vector<int64_t> out_splits = g.rank() == 0 ? std::vector<int64_t>{1, 1} : std::vector<int64_t>{2, 1};
        try {
          g.all_to_all(zeros({g.rank() == 0 ? 2 : 3}), zeros({2}), out_splits, in_splits).wait();
        } catch (const std::exception& e) {
          errors[size_t(g.rank())] = e.what();
        }
      },
      std::chrono::seconds(5));
  CHECK_THAT(errors[1], Catch::Contains("mismatched collectives: rank 1 called all_to_all(2 x float32 to this rank)") &&
                            Catch::Contains("rank 0 called all_to_all(1 x float32 to this rank)"));
  // An empty piece where one row is expected is named as a piece of 0, not as the call.
  std::fill(errors.begin(), errors.end(), "");
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        // Rank 0 sends itself 2 rows and rank 1 none; rank 1 expects 1 from rank 0.
        const int me = g.rank();
        const std::vector<int64_t> in_splits = me == 0 ? std::vector<int64_t>{2, 0} : std::vector<int64_t>{1, 1};
        const std::vector<int64_t> out_splits = me == 0 ? std::vector<int64_t>{2, 1} : std::vector<int64_t>{1, 1};
        try {
          g.all_to_all(zeros({me == 0 ? 3 : 2}), zeros({2}), out_splits, in_splits).wait();
        } catch (const std::exception& e) {
          errors[size_t(g.rank())] = e.what();
        }
      },
      std::chrono::seconds(5));
  CHECK_THAT(errors[1], Catch::Contains("rank 1 called all_to_all(1 x float32 to this rank)") &&
                            Catch::Contains("rank 0 called all_to_all(0 x float32 to this rank)"));
}

TEST_CASE("an all_to_all that meets another collective names both calls") {
  through_shared_memory = GENERATE(true, false);
  INFO((through_shared_memory ? "through shared memory" : "over sockets"));
  std::vector<std::string> errors(2);
  run_threads(
      2,
      [&](ProcessGroupTCP& g) {
        try {
          if (g.rank() == 0) g.all_to_all(zeros({2}), zeros({2})).wait();
          if (g.rank() == 1) g.all_reduce(zeros({2})).wait();
        } catch (const std::exception& e) {
          errors[size_t(g.rank())] = e.what();
        }
      },
      std::chrono::seconds(5));
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
  CHECK_THAT(errors[0] + errors[1], Catch::Contains("mismatched collectives") && Catch::Contains("all_to_all(") &&
                                        Catch::Contains("all_reduce(SUM, 2 x float32)"));
  if (through_shared_memory)  // agree() compares the calls, not yet their pieces
    CHECK_THAT(errors[0], Catch::Contains("all_to_all(float32 pieces among 2 ranks)"));
}
