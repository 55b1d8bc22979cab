// new_group: a group of some ranks with its own connections, its own shared memory and its
// own checks; its collectives equal their closed forms over its members, beside the
// default group's; ranks outside get nullptr; a disagreement about the list is named.
#include <mutex>

#include "catch2/catch.hpp"
#include "dist/tcp_group.h"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::run_threads;
using engine::testing::run_threads_with;
namespace cf = engine::testing::closed_forms;

TEST_CASE("subgroups of 4 ranks: every op over the members only, the default group unchanged") {
  for (bool shm : {true, false}) {
    INFO((shm ? "shared memory allowed" : "TCP only"));
    std::vector<std::string> problems(4);
    std::vector<std::string> algorithms(4);
    run_threads(
        4,
        [&](ProcessGroupTCP& g) {
          std::string& p = problems[size_t(g.rank())];
          auto evens = g.new_group({2, 0});     // listed in any order: ranks 0, 2
          auto upper = g.new_group({1, 2, 3});  // rank 2 is in both
          const bool in_evens = g.rank() % 2 == 0, in_upper = g.rank() >= 1;
          if ((evens != nullptr) != in_evens || (upper != nullptr) != in_upper) p = "membership";
          std::vector<float> sum;
          if (evens && p.empty()) {
            if (evens->rank() != g.rank() / 2 || evens->size() != 2) p = "evens numbering";
            if (p.empty()) p = cf::check_every_op(*evens, 100, &sum);
            algorithms[size_t(g.rank())] = evens->all_reduce_algorithm();
          }
          if (upper && p.empty()) {
            if (upper->rank() != g.rank() - 1 || upper->size() != 3) p = "upper numbering";
            if (p.empty()) p = cf::check_every_op(*upper, 1000, &sum);
            // Rooted collectives inside the subgroup too: reduce and gather to its rank 2 (rank 3
            // here), and an all_to_all among its three.
            Tensor t = cf::input(upper->rank(), 10);
            upper->reduce(t, 2).wait();
            if (p.empty() && upper->rank() == 2 &&
                t.to_vector<float>()[0] != float(cf::closed_form(ReduceOp::Sum, 3, 0)))
              p = "reduce in the subgroup";
            std::vector<Tensor> gathered;
            upper->gather(&gathered, full({2}, double(g.rank())), 2).wait();
            for (int r = 0; r < 3 && p.empty() && upper->rank() == 2; ++r)
              if (gathered[size_t(r)].to_vector<float>()[0] != float(r + 1)) p = "gather in the subgroup";
            // Member i (rank i + 1) sends 10 (i + 1) + j to member j.
            const float base = float(10 * g.rank());
            Tensor out = zeros({3});
            upper->all_to_all(out, from_vector(std::vector<float>{base, base + 1, base + 2})).wait();
            for (int i = 0; i < 3 && p.empty(); ++i)
              if (out.to_vector<float>()[size_t(i)] != float(10 * (i + 1) + upper->rank()))
                p = "all_to_all in the subgroup";
          }
          // The default group, after and between: still all four ranks.
          if (p.empty()) p = cf::check_every_op(g, 50, &sum);
        },
        std::chrono::seconds(20), shm);
    for (int r = 0; r < 4; ++r) {
      INFO("rank " << r);
      CHECK(problems[size_t(r)] == "");
    }
    CHECK(algorithms[0] == (shm ? "shm" : "ring"));  // one machine: shared memory within the subgroup
  }
}

TEST_CASE("a subgroup spanning two machines runs the hierarchical all-reduce, and it and reduce are right") {
  std::vector<std::string> problems(4), algorithms(4);
  run_threads_with(
      4, [](int rank, TCPGroupOptions& o) { o.host_id = rank < 2 ? "machine-a" : "machine-b"; },
      [&](ProcessGroupTCP& g) {
        auto sub = g.new_group({0, 1, 2});  // two ranks on a, one on b
        if (!sub) return;
        std::vector<float> sum;
        std::string& p = problems[size_t(g.rank())];
        p = cf::check_every_op(*sub, 300, &sum);
        algorithms[size_t(g.rank())] = sub->all_reduce_algorithm();
        // reduce to each of the subgroup's ranks: its root gets the sum, the others keep theirs.
        for (int dst = 0; dst < sub->size() && p.empty(); ++dst) {
          const std::vector<float> mine = cf::input(sub->rank(), 300).to_vector<float>();
          Tensor t = cf::input(sub->rank(), 300);
          sub->reduce(t, dst).wait();
          const std::vector<float> got = t.to_vector<float>();
          for (int64_t i = 0; i < 300 && p.empty(); ++i) {
            const double want = sub->rank() == dst ? cf::closed_form(ReduceOp::Sum, 3, i) : mine[size_t(i)];
            if (got[size_t(i)] != float(want))
              p = "reduce to " + std::to_string(dst) + ", element " + std::to_string(i) + ": got " +
                  std::to_string(got[size_t(i)]) + ", want " + std::to_string(want);
          }
        }
      });
  for (int r = 0; r < 3; ++r) {
    CHECK(problems[size_t(r)] == "");
    CHECK(algorithms[size_t(r)] == "hierarchical");
  }
}

TEST_CASE("bad lists are named; ranks given different lists are told which") {
  run_threads(2, [](ProcessGroupTCP& g) {
    RANK_REQUIRE_THROWS_WITH(g.new_group({}), Catch::Contains("[new_group] the list of ranks is empty"));
    RANK_REQUIRE_THROWS_WITH(g.new_group({0, 2}), Catch::Contains("[new_group] rank 2 is outside 0..1"));
    RANK_REQUIRE_THROWS_WITH(g.new_group({1, 1}), Catch::Contains("[new_group] rank 1 is listed twice"));
  });
  std::vector<std::string> errors(3);
  run_threads(
      3,
      [&](ProcessGroupTCP& g) {
        try {
          g.new_group(g.rank() == 2 ? std::vector<int>{0, 2} : std::vector<int>{0, 1});
        } catch (const std::exception& e) {
          errors[size_t(g.rank())] = e.what();
        }
      },
      std::chrono::seconds(5));
  // Rank 0 is in both lists and sees the disagreement, naming the rank that differs.
  CHECK_THAT(errors[0], Catch::Contains("rank 0 was given ranks {0,1} but rank 2 was given {0,2}"));
}

TEST_CASE("a mismatch inside a subgroup names the default group's ranks") {
  std::vector<std::string> errors(3);
  run_threads(
      3,
      [&](ProcessGroupTCP& g) {
        auto sub = g.new_group({1, 2});
        if (!sub) return;
        try {
          Tensor t = ones({8});
          if (sub->rank() == 0)
            sub->all_reduce(t).wait();
          else
            sub->broadcast(t, 0).wait();
        } catch (const std::exception& e) {
          errors[size_t(g.rank())] = e.what();
        }
      },
      std::chrono::seconds(5), /*shared_memory=*/false);
  CHECK_THAT(errors[1] + errors[2],
             Catch::Contains("mismatched collectives") &&
                 (Catch::Contains("rank 2 (rank 1 of the group)") || Catch::Contains("rank 1 (rank 0 of the group)")));
}
