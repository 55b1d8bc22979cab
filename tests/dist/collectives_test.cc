// Collectives of the CPU backend with ranks as threads: closed-form results for world
// sizes 1 to 8 and element counts 0 to 2^20+3, identical bits on every rank.
#include <atomic>
#include <cmath>
#include <mutex>
#include <random>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/reduce_into.h"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::run_threads;

using namespace engine::testing::closed_forms;

TEST_CASE("all_reduce: every op, world sizes 1 to 8, counts 0 to 2^20+3, shared memory and TCP ring") {
  for (bool shm : {true, false})
    for (int world : {1, 2, 3, 4, 5, 8}) {
      std::vector<int64_t> counts = {0, 1, 7, 1023};
      if (world <= 4) counts.push_back((1 << 20) + 3);
      for (int64_t n : counts) {
        std::vector<std::vector<float>> results(static_cast<size_t>(world));
        run_threads(
            world,
            [&](ProcessGroupTCP& g) {
              const std::string why = check_every_op(g, n, &results[size_t(g.rank())]);
              RANK_REQUIRE(why == "");
              RANK_REQUIRE(g.uses_shared_memory() == (shm && world > 1));
            },
            std::chrono::seconds(20), shm);
        for (int r = 1; r < world; ++r) RANK_REQUIRE(results[size_t(r)] == results[0]);  // identical bits
      }
    }
}

TEST_CASE("Work::wait asks its helper to run queued work until it is done, then sleeps") {
  Work done_by_helper = Work::pending();
  std::atomic<int> calls{0};
  done_by_helper.set_helper([&] {
    if (++calls == 3) done_by_helper.finish();  // the third queued task was this work
    return true;
  });
  std::thread fallback([&] {  // so that a wait that never asks fails the check, not the clock
    std::this_thread::sleep_for(std::chrono::seconds(1));
    done_by_helper.finish();
  });
  done_by_helper.wait();
  fallback.join();
  CHECK(calls == 3);
  // A helper with nothing to run (the worker has the task): wait sleeps until it finishes.
  Work done_elsewhere = Work::pending();
  int asked = 0;
  done_elsewhere.set_helper([&] {
    ++asked;
    return false;
  });
  std::thread worker([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    done_elsewhere.finish();
  });
  done_elsewhere.wait();
  worker.join();
  CHECK(asked == 1);
  CHECK(done_elsewhere.is_completed());
}

TEST_CASE("a thread that waits for a collective may run the queue itself: in order, with the worker") {
  for (bool shm : {true, false})
    run_threads(
        3,
        [](ProcessGroupTCP& g) {
          // Three collectives queued, then waited for last-first: whoever runs them (this
          // thread or the worker) runs them in the order they were called.
          Tensor a = full({5}, double(g.rank() + 1)), b = full({300}, double(g.rank())), c = full({2}, 1.0);
          Work wa = g.all_reduce(a, ReduceOp::Sum), wb = g.broadcast(b, 2), wc = g.all_reduce(c, ReduceOp::Max);
          wc.wait();
          RANK_REQUIRE(wa.is_completed());  // ran before c, whichever thread ran it
          RANK_REQUIRE(wb.is_completed());
          wa.wait(), wb.wait();
          RANK_REQUIRE(a.to_vector<float>() == std::vector<float>(5, 6.f));
          RANK_REQUIRE(b.to_vector<float>() == std::vector<float>(300, 2.f));
          RANK_REQUIRE(c.to_vector<float>() == std::vector<float>(2, 1.f));
          // Blocking calls, run by the caller or the worker, whichever comes first.
          for (int i = 0; i < 50; ++i) {
            Tensor t = full({4}, double(i + g.rank()));
            g.all_reduce(t, ReduceOp::Sum).wait();
            RANK_REQUIRE(t.to_vector<float>() == std::vector<float>(4, float(3 * i + 3)));
          }
        },
        std::chrono::seconds(20), shm);
}

TEST_CASE("all_reduce of int64 and of 16M floats") {
  run_threads(3, [](ProcessGroupTCP& g) {
    Tensor t = input(g.rank(), 1000, DType::Int64);
    g.all_reduce(t, ReduceOp::Sum).wait();
    RANK_REQUIRE(t.at({999}) == double(999 % 7 + 1) * 6);
    RANK_REQUIRE_THROWS_WITH(g.all_reduce(t, ReduceOp::Avg),
                             Catch::Contains("[all_reduce] AVG needs a floating-point tensor"));
  });
  run_threads(2, [](ProcessGroupTCP& g) {
    Tensor t = full({16 << 20}, double(g.rank() + 1));
    g.all_reduce(t, ReduceOp::Sum).wait();
    RANK_REQUIRE(min(t).item() == 3);
    RANK_REQUIRE(max(t).item() == 3);
  });
}

TEST_CASE("all_reduce of bfloat16 and float16: closed form, half the bytes of float32") {
  // Rank r holds x_i = (i % 13 + r) / 8. Every partial sum over 3 ranks is a multiple of 1/8
  // below 8, which both 16-bit types hold exactly, so the sum is exact on any path; the
  // average is that sum divided by 3 and rounded once.
  for (bool shm : {true, false})
    for (DType h : {DType::BFloat16, DType::Float16})
      run_threads(
          3,
          [h, shm](ProcessGroupTCP& g) {
            const int64_t n = 100003;
            std::vector<float> x(static_cast<size_t>(n));
            for (int64_t i = 0; i < n; ++i) x[size_t(i)] = float(i % 13 + g.rank()) / 8;
            Tensor sum = from_vector(x).to(h), avg = sum.clone();
            const uint64_t before = g.bytes_sent();
            g.all_reduce(sum, ReduceOp::Sum).wait();
            const uint64_t sent = g.bytes_sent() - before;
            g.all_reduce(avg, ReduceOp::Avg).wait();
            RANK_REQUIRE(sum.dtype() == h);
            const std::vector<float> s = sum.to_vector<float>(), a = avg.to_vector<float>();
            for (int64_t i = 0; i < n; i += 997) {
              const float want = float(3 * (i % 13) + 3) / 8;
              RANK_REQUIRE(s[size_t(i)] == want);
              RANK_REQUIRE(a[size_t(i)] ==
                           float(h == DType::BFloat16 ? float(bfloat16(want / 3)) : float(float16(want / 3))));
            }
            // The ring sends 2 (n-1)/n of the tensor's bytes: 2 bytes an element, not 4.
            if (!shm) RANK_REQUIRE(std::llabs(int64_t(sent) - int64_t(2 * n * 2 * 2 / 3)) < 4096);
          },
          std::chrono::seconds(20), shm);
}

// The 16-bit reduction widens blocks with vector conversions; it must give the bits of the
// per-element rule acc = T(float(acc) op float(in)), NaN and Inf included.
template <class T>
void check_16bit_reduction_matches_scalar_rule() {
  std::mt19937 gen(7);
  std::uniform_int_distribution<uint32_t> bits(0, 0xffff);
  const int64_t n = 3000;  // spans block edges (1024)
  std::vector<T> acc(static_cast<size_t>(n)), in(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) {
    acc[size_t(i)].bits = uint16_t(bits(gen));
    in[size_t(i)].bits = uint16_t(bits(gen));
  }
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Product, ReduceOp::Min, ReduceOp::Max}) {
    std::vector<T> want = acc, got = acc;
    reduce_into(want.data(), in.data(), n, op);  // the scalar loop
    reduce_into(got.data(), in.data(), n, dtype_of<T>(), op);
    for (int64_t i = 0; i < n; ++i) {
      const float w = float(want[size_t(i)]), g = float(got[size_t(i)]);
      INFO("element " << i << " op " << int(op) << ": " << w << " vs " << g);
      REQUIRE(((std::isnan(w) && std::isnan(g)) || want[size_t(i)].bits == got[size_t(i)].bits));
    }
  }
}

TEST_CASE("16-bit reduction through vector conversions gives the scalar rule's bits") {
  check_16bit_reduction_matches_scalar_rule<bfloat16>();
  check_16bit_reduction_matches_scalar_rule<float16>();
}

TEST_CASE("broadcast, all_gather, reduce_scatter, barrier, send and recv") {
  for (bool shm : {true, false})
    for (int world : {1, 2, 3, 5}) {
      run_threads(
          world,
          [world](ProcessGroupTCP& g) {
            const int r = g.rank();
            // broadcast from the last rank
            Tensor b = full({5, 3}, double(r));
            g.broadcast(b, world - 1).wait();
            RANK_REQUIRE(min(b).item() == world - 1);
            RANK_REQUIRE(max(b).item() == world - 1);
            // all_gather: outputs[k] is rank k's input
            std::vector<Tensor> outs;
            g.all_gather(&outs, full({2, 2}, double(10 * r))).wait();
            RANK_REQUIRE(int(outs.size()) == world);
            for (int k = 0; k < world; ++k) RANK_REQUIRE(outs[size_t(k)].at({1, 1}) == 10 * k);
            // reduce_scatter: rank k gets the sum over ranks of block k (block k of rank j is j*100+k)
            Tensor in = empty({world * 4});
            for (int k = 0; k < world; ++k) in.narrow(0, k * 4, 4).fill_(r * 100 + k);
            Tensor out = empty({4});
            g.reduce_scatter(out, in, ReduceOp::Sum).wait();
            RANK_REQUIRE(out.at({3}) == 100.0 * world * (world - 1) / 2 + world * r);
            g.reduce_scatter(out, in, ReduceOp::Avg).wait();
            RANK_REQUIRE(out.at({3}) == Approx((100.0 * world * (world - 1) / 2 + world * r) / world));
            g.reduce_scatter(out, in, ReduceOp::Max).wait();
            RANK_REQUIRE(out.at({0}) == 100.0 * (world - 1) + r);
            g.barrier().wait();
            // send/recv around a ring, if there is more than one rank
            if (world > 1) {
              Tensor mine = full({3}, double(r)), theirs = empty({3});
              Work s = g.send(mine, (r + 1) % world);
              g.recv(theirs, (r + world - 1) % world).wait();
              s.wait();
              RANK_REQUIRE(theirs.at({0}) == (r + world - 1) % world);
            }
          },
          std::chrono::seconds(20), shm);
    }
}

TEST_CASE("async work runs in call order and overlaps the caller") {
  run_threads(2, [](ProcessGroupTCP& g) {
    std::vector<Tensor> ts;
    std::vector<Work> ws;
    for (int i = 0; i < 20; ++i) {
      ts.push_back(full({1000}, double(i + g.rank())));
      ws.push_back(g.all_reduce(ts.back()));
    }
    for (int i = 0; i < 20; ++i) {
      ws[size_t(i)].wait();
      RANK_REQUIRE(ts[size_t(i)].at({0}) == 2 * i + 1);
    }
  });
}

// In shared memory each call is compared across ranks after one barrier. A rank through it
// first posts its next call while another is still comparing this one: the posts must not
// meet. Barriers (whose whole body is that comparison) back to back with other calls, so a
// fast rank is often a call ahead.
TEST_CASE("back-to-back collectives of different kinds: a rank a call ahead is not a mismatch") {
  for (int world : {2, 3}) {
    run_threads(world, [](ProcessGroupTCP& g) {
      RANK_REQUIRE(g.uses_shared_memory());
      Tensor one = zeros({1}), two = zeros({2});
      for (int i = 0; i < 3000; ++i) {
        g.barrier().wait();
        one.fill_(double(g.rank()));
        g.all_reduce(one, ReduceOp::Max).wait();
        RANK_REQUIRE(one.item() == g.size() - 1);
        g.barrier().wait();
        two.fill_(double(g.rank() + i));
        g.broadcast(two, i % g.size()).wait();
        RANK_REQUIRE(two.at({1}) == i % g.size() + i);
      }
    });
  }
}

TEST_CASE("bad arguments are refused before any communication") {
  run_threads(2, [](ProcessGroupTCP& g) {
    Tensor t = zeros({4});
    RANK_REQUIRE_THROWS_WITH(g.broadcast(t, 2), Catch::Contains("[broadcast] root 2 is outside 0..1"));
    RANK_REQUIRE_THROWS_WITH(g.send(t, g.rank()), Catch::Contains("[send] destination"));
    RANK_REQUIRE_THROWS_WITH(g.all_reduce(zeros({4, 4}).transpose(0, 1)), Catch::Contains("needs a contiguous tensor"));
    Tensor out = zeros({3});
    RANK_REQUIRE_THROWS_WITH(g.reduce_scatter(out, zeros({4})), Catch::Contains("must hold world size (2) x output"));
    g.barrier().wait();
  });
}

TEST_CASE("shared buffers reduce in place, whole or in part") {
  for (int world : {2, 3}) {
    run_threads(world, [world](ProcessGroupTCP& g) {
      Tensor buf = g.shared_buffer(1000);
      RANK_REQUIRE(buf.numel() == 1000);
      RANK_REQUIRE(max(abs(buf)).item() == 0);  // starts zeroed
      buf.copy_(input(g.rank(), 1000));
      g.all_reduce(buf, ReduceOp::Sum).wait();
      for (int64_t i : {0, 7, 999}) RANK_REQUIRE(buf.at({i}) == closed_form(ReduceOp::Sum, world, i));
      // A slice of it (as DDP reduces one bucket of a larger buffer) also works in place.
      Tensor part = buf.narrow(0, 100, 50);
      part.fill_(double(g.rank() + 1));
      g.all_reduce(part, ReduceOp::Max).wait();
      RANK_REQUIRE(min(part).item() == world);
      RANK_REQUIRE(buf.at({99}) == closed_form(ReduceOp::Sum, world, 99));  // untouched outside the slice
    });
  }
}

TEST_CASE("shared memory sums and averages floats in rank order, dividing once: exact bits") {
  // Values with no common scale, so that the order of the adds and the way of dividing
  // (a / 3 against a * (1/3)) both show in the last bits. Staged (a plain tensor) and in
  // place (a shared buffer); lengths around 16-float vectors.
  auto value = [](int rank, int64_t i) { return float(std::sin(0.37 * double(i) + rank) * std::pow(10.0, i % 7 - 3)); };
  for (const int64_t n : {1, 15, 17, 1000}) {
    run_threads(3, [&](ProcessGroupTCP& g) {
      std::vector<float> mine(static_cast<size_t>(n)), sum_want(mine.size()), avg_want(mine.size());
      for (int64_t i = 0; i < n; ++i) {
        mine[size_t(i)] = value(g.rank(), i);
        const float s = (value(0, i) + value(1, i)) + value(2, i);
        sum_want[size_t(i)] = s;
        avg_want[size_t(i)] = s / 3.0f;
      }
      for (bool in_place : {false, true}) {
        for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg}) {
          Tensor t = in_place ? g.shared_buffer(n) : empty({n});
          t.copy_(from_vector(mine));
          g.all_reduce(t, op).wait();
          RANK_REQUIRE(t.to_vector<float>() == (op == ReduceOp::Sum ? sum_want : avg_want));
        }
      }
    });
  }
}

// As PyTorch's: the tensors in the list are written into, so views of one larger tensor
// (a row each, or a strided column each) end up holding every rank's input.
TEST_CASE("all_gather and gather write into given tensors") {
  for (bool shm : {true, false})
    for (int world : {1, 2, 3}) {
      run_threads(
          world,
          [world](ProcessGroupTCP& g) {
            const int r = g.rank();
            Tensor rows = zeros({world, 3}), cols = zeros({3, world});
            std::vector<Tensor> row_views, col_views;
            for (int k = 0; k < world; ++k) row_views.push_back(rows.select(0, k));
            for (int k = 0; k < world; ++k) col_views.push_back(cols.select(1, k));  // strided
            g.all_gather(&row_views, full({3}, double(r + 1))).wait();
            g.all_gather(&col_views, full({3}, double(r + 1))).wait();
            for (int k = 0; k < world; ++k) {
              RANK_REQUIRE(rows.at({k, 2}) == k + 1);
              RANK_REQUIRE(cols.at({2, k}) == k + 1);
            }
            Tensor gathered = zeros({3, world});
            std::vector<Tensor> into;
            for (int k = 0; k < world; ++k) into.push_back(gathered.select(1, k));
            g.gather(&into, full({3}, double(10 * (r + 1))), 0).wait();
            for (int k = 0; k < world; ++k) RANK_REQUIRE(gathered.at({1, k}) == (r == 0 ? 10 * (k + 1) : 0));
            // Lists that cannot be written into are refused on every rank, before anything is sent.
            std::vector<Tensor> too_few(size_t(world + 1), zeros({3}));
            RANK_REQUIRE_THROWS_WITH(g.all_gather(&too_few, zeros({3})),
                                     Catch::Contains("the output list holds " + std::to_string(world + 1) +
                                                     " tensors, the group has " + std::to_string(world) + " ranks"));
            std::vector<Tensor> wrong(size_t(world), zeros({4}));
            RANK_REQUIRE_THROWS_WITH(g.all_gather(&wrong, zeros({3})),
                                     Catch::Contains("output 0 is (4,) float32 on cpu, the input (3,) float32 on cpu"));
            std::vector<Tensor> repeated(size_t(world), zeros({1}).expand({3}));
            RANK_REQUIRE_THROWS_WITH(g.all_gather(&repeated, zeros({3})), Catch::Contains("repeats elements"));
            g.barrier().wait();
          },
          std::chrono::seconds(20), shm);
    }
}
