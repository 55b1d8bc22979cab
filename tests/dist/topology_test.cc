// The CPU backend's topology and all-reduce algorithms, with ranks as threads that act as
// several machines (TCPGroupOptions::host_id): the algorithm chosen for each layout, the
// hierarchical all-reduce against closed forms with identical bits on every rank, only
// machine leaders on the network, and the other collectives beside it.
#include <cmath>
#include <cstdlib>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/dist/closed_forms.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::run_threads_with;

using namespace engine::testing::closed_forms;

namespace {
// Runs fn on one rank per letter of `machines` ("AABB": ranks 0, 1 on machine A, ...).
void on_machines(const std::string& machines, const std::function<void(ProcessGroupTCP&)>& fn,
                 const std::string& algorithm = "auto") {
  run_threads_with(
      int(machines.size()),
      [&](int r, TCPGroupOptions& o) {
        o.host_id = std::string("machine-") + machines[size_t(r)];
        o.all_reduce = algorithm;
      },
      fn);
}
}  // namespace

TEST_CASE("the algorithm follows the topology: shm on one machine, ring with one rank per machine, else hierarchical") {
  const std::vector<std::pair<std::string, std::string>> cases = {
      {"AAAA", "shm"}, {"ABCD", "ring"}, {"AABB", "hierarchical"}, {"AAAB", "hierarchical"}, {"ABAB", "hierarchical"}};
  for (const auto& [machines, want] : cases) {
    std::vector<std::string> got(machines.size());
    std::vector<int> count(machines.size());
    on_machines(machines, [&](ProcessGroupTCP& g) {
      got[size_t(g.rank())] = g.all_reduce_algorithm();
      count[size_t(g.rank())] = g.machine_count();
    });
    for (size_t r = 0; r < machines.size(); ++r) {
      INFO(machines << ", rank " << r);
      CHECK(got[r] == want);
      CHECK(count[r] == int(std::set<char>(machines.begin(), machines.end()).size()));
    }
  }
}

TEST_CASE("hierarchical all_reduce: every op equals its closed form, the same bits on every rank") {
  for (const std::string machines : {"AABB", "AAAB", "ABAB", "AABBB", "AB"}) {
    const int world = int(machines.size());
    for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t(1023), int64_t((1 << 18) + 3)}) {
      std::vector<std::vector<float>> sums(static_cast<size_t>(world));
      on_machines(
          machines,
          [&](ProcessGroupTCP& g) {
            const std::string why = check_every_op(g, n, &sums[size_t(g.rank())]);
            RANK_REQUIRE(why == "");
            Tensor big = full({3}, double(INT64_C(1) << 40), DType::Int64) * double(g.rank() + 1);
            g.all_reduce(big, ReduceOp::Max).wait();  // int64 too, past float's exact range
            RANK_REQUIRE(big.to_vector<int64_t>() == std::vector<int64_t>(3, (INT64_C(1) << 40) * world));
          },
          "hierarchical");
      for (int r = 1; r < world; ++r) {
        INFO(machines << ", n " << n << ", rank " << r);
        CHECK(sums[size_t(r)] == sums[0]);
      }
    }
  }
}

TEST_CASE("hierarchical all_reduce of bfloat16 and float16: every op near its closed form, the same bits everywhere") {
  for (const std::string machines : {"AABB", "AAAB", "ABAB"})
    for (DType h : {DType::BFloat16, DType::Float16}) {
      const int world = int(machines.size());
      std::vector<std::vector<float>> sums(static_cast<size_t>(world));
      on_machines(
          machines,
          [&](ProcessGroupTCP& g) {
            const std::string why = check_every_op(g, 3001, &sums[size_t(g.rank())], h);
            RANK_REQUIRE(why == "");
          },
          "hierarchical");
      for (int r = 1; r < world; ++r) {
        INFO(machines << " " << dtype_name(h) << ", rank " << r);
        CHECK(sums[size_t(r)] == sums[0]);
      }
    }
}

TEST_CASE("hierarchical: only each machine's leader sends over TCP, 2(m-1)/m of the data for m machines") {
  const int64_t n = 1 << 16;  // 256 KiB
  std::vector<uint64_t> sent(4);
  on_machines("AABB", [&](ProcessGroupTCP& g) {
    const uint64_t before = g.bytes_sent();
    Tensor t = input(g.rank(), n);
    g.all_reduce(t).wait();
    sent[size_t(g.rank())] = g.bytes_sent() - before;
  });
  const double payload = 2.0 * (2 - 1) / 2 * n * 4;  // the ring over 2 leaders
  CHECK(sent[1] == 0);
  CHECK(sent[3] == 0);
  CHECK(double(sent[0]) >= payload);
  CHECK(double(sent[0]) < payload * 1.01);  // plus the headers
  CHECK(sent[2] == sent[0]);
}

TEST_CASE(
    "beside the hierarchical all_reduce, broadcast, all_gather, reduce_scatter, barrier and shared buffers work") {
  on_machines("AABB", [&](ProcessGroupTCP& g) {
    const int r = g.rank(), w = g.size();
    Tensor b = full({5}, double(r));
    g.broadcast(b, 2).wait();
    RANK_REQUIRE(b.to_vector<float>() == std::vector<float>(5, 2.0f));
    std::vector<Tensor> all;
    g.all_gather(&all, full({2}, double(r * 10))).wait();
    for (int k = 0; k < w; ++k) RANK_REQUIRE(all[size_t(k)].to_vector<float>() == std::vector<float>(2, k * 10.0f));
    Tensor out = empty({3});
    g.reduce_scatter(out, full({3 * w}, double(r + 1))).wait();
    RANK_REQUIRE(out.to_vector<float>() == std::vector<float>(3, float(w * (w + 1) / 2)));
    g.barrier().wait();
    // DDP's buckets: a shared buffer reduced in place.
    Tensor buf = g.shared_buffer(100);
    buf.fill_(double(r + 1));
    g.all_reduce(buf, ReduceOp::Avg).wait();
    RANK_REQUIRE(buf.to_vector<float>() == std::vector<float>(100, (w + 1) / 2.0f));
  });
}

TEST_CASE("forcing an algorithm: ring anywhere, hierarchical on one machine, shm across machines refused") {
  std::vector<std::string> got(4);
  on_machines(
      "AABB", [&](ProcessGroupTCP& g) { got[size_t(g.rank())] = g.all_reduce_algorithm(); }, "ring");
  CHECK(got == std::vector<std::string>(4, "ring"));
  on_machines(
      "AAAA",
      [&](ProcessGroupTCP& g) {
        got[size_t(g.rank())] = g.all_reduce_algorithm();
        Tensor t = input(g.rank(), 10);
        g.all_reduce(t).wait();
        RANK_REQUIRE(t.to_vector<float>()[3] == float(4 * 10));
      },
      "hierarchical");
  CHECK(got == std::vector<std::string>(4, "hierarchical"));
  CHECK_THROWS_WITH(
      on_machines(
          "AABB", [](ProcessGroupTCP&) {}, "shm"),
      Catch::Contains("ENGINE_ALLREDUCE=shm needs every rank on one machine") && Catch::Contains("2 machines"));
  CHECK_THROWS_WITH(on_machines(
                        "AB", [](ProcessGroupTCP&) {}, "fastest"),
                    Catch::Contains("use ring, shm"));
}

namespace {
// Sets an environment variable for one scope (the ranks are threads of this process).
struct ScopedEnv {
  std::string name;
  ScopedEnv(const char* n, const char* v) : name(n) { setenv(n, v, 1); }
  ~ScopedEnv() { unsetenv(name.c_str()); }
};
}  // namespace

TEST_CASE("ENGINE_PORT_RANGE and ENGINE_SOCKET_IFNAME choose where ranks listen; bad values are named") {
  {
    ScopedEnv range("ENGINE_PORT_RANGE", "29870-29899");
    std::vector<int> ports(3);
    engine::testing::run_threads(3, [&](ProcessGroupTCP& g) {
      const std::string& a = g.address();
      ports[size_t(g.rank())] = std::stoi(a.substr(a.rfind(':') + 1));
    });
    for (int p : ports) CHECK((p >= 29870 && p <= 29899));
    CHECK(std::set<int>(ports.begin(), ports.end()).size() == 3);
  }
  {
    ScopedEnv ifname("ENGINE_SOCKET_IFNAME", "lo");
    std::vector<std::string> hosts(2);
    engine::testing::run_threads(
        2, [&](ProcessGroupTCP& g) { hosts[size_t(g.rank())] = g.address().substr(0, g.address().rfind(':')); });
    CHECK(hosts == std::vector<std::string>(2, "127.0.0.1"));
  }
  const std::vector<std::tuple<const char*, const char*, const char*>> bad = {
      {"ENGINE_PORT_RANGE", "29870", "must be two ports, LOW-HIGH"},
      {"ENGINE_PORT_RANGE", "29899-29870", "ENGINE_PORT_RANGE's high port"},
      {"ENGINE_PORT_RANGE", "0-10", "ENGINE_PORT_RANGE's low port"},
      {"ENGINE_SOCKET_IFNAME", "nosuchif0", "ENGINE_SOCKET_IFNAME=nosuchif0: no interface of that name"},
      {"ENGINE_SOCKET_IFNAME", "an-interface-name-too-long", "longer than an interface name can be"}};
  for (const auto& [name, value, message] : bad) {
    ScopedEnv e(name, value);
    INFO(name << "=" << value);
    CHECK_THROWS_WITH(engine::testing::run_threads(
                          2, [](ProcessGroupTCP&) {}, std::chrono::seconds(3)),
                      Catch::Contains(message));
  }
}
