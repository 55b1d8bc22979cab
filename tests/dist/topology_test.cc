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

// Rank r's block for the gathers: element i = 1000 r + i (exact in every dtype used).
Tensor block_of(int r, int64_t m, DType dtype) { return (arange(0, double(m)) + double(1000 * r)).to(dtype); }

TEST_CASE("hierarchical all_gather, reduce_scatter and broadcast: closed forms on every layout and dtype") {
  for (const std::string machines : {"AABB", "AAAB", "ABAB", "AABBB", "BAAB"})
    for (DType dtype : {DType::Float32, DType::Int64, DType::BFloat16})
      for (int64_t m : {int64_t(0), int64_t(1), int64_t(5), int64_t(1 << 12)}) {
        if (dtype == DType::BFloat16 && m > 256) continue;  // 1000 r + i stays exact in 8 bits only below 256
        INFO(machines << " " << dtype_name(dtype) << " m " << m);
        on_machines(
            machines,
            [&](ProcessGroupTCP& g) {
              const int r = g.rank(), w = g.size();
              RANK_REQUIRE(g.all_reduce_algorithm() == "hierarchical");
              const Tensor mine = dtype == DType::BFloat16 ? full({m}, double(r + 1)).to(dtype) : block_of(r, m, dtype);
              const auto want_block = [&](int k) {
                return (dtype == DType::BFloat16 ? full({m}, double(k + 1)).to(dtype) : block_of(k, m, dtype))
                    .to(DType::Float32)
                    .to_vector<float>();
              };
              // all_gather and all_gather_into_tensor: block k is rank k's.
              std::vector<Tensor> outs;
              g.all_gather(&outs, mine).wait();
              Tensor flat = empty({w * m}, dtype);
              g.all_gather_into_tensor(flat, mine).wait();
              for (int k = 0; k < w; ++k) {
                RANK_REQUIRE(outs[size_t(k)].to(DType::Float32).to_vector<float>() == want_block(k));
                RANK_REQUIRE(flat.narrow(0, k * m, m).to(DType::Float32).to_vector<float>() == want_block(k));
              }
              // reduce_scatter: rank r gets op over ranks of block r, where rank q's block j
              // is (q + 1) (j + 1) everywhere.
              std::vector<float> in(static_cast<size_t>(w * m));
              for (int j = 0; j < w; ++j)
                for (int64_t i = 0; i < m; ++i) in[size_t(j * m + i)] = float((r + 1) * (j + 1));
              for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min, ReduceOp::Avg}) {
                if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
                const Tensor input = from_vector(in, {w * m}).to(dtype);
                Tensor out = empty({m}, dtype);
                g.reduce_scatter(out, input, op).wait();
                double want = (r + 1) * w * (w + 1) / 2.0;  // Sum over q of (q + 1)(r + 1)
                if (op == ReduceOp::Max) want = double((r + 1) * w);
                if (op == ReduceOp::Min) want = double(r + 1);
                if (op == ReduceOp::Avg) want = (r + 1) * (w + 1) / 2.0;
                const std::vector<float> got = out.to(DType::Float32).to_vector<float>();
                for (float v : got) RANK_REQUIRE(std::fabs(v - want) <= std::fabs(want) * 0x1p-8);
                RANK_REQUIRE(input.to(DType::Float32).to_vector<float>() == from_vector(in).to_vector<float>());
              }
              // broadcast from every root.
              for (int root = 0; root < w; ++root) {
                Tensor b = r == root ? mine.clone() : zeros({m}, dtype);
                g.broadcast(b, root).wait();
                RANK_REQUIRE(b.to(DType::Float32).to_vector<float>() == want_block(root));
              }
            },
            "hierarchical");
      }
}

TEST_CASE("hierarchical all_gather, reduce_scatter and broadcast: only leaders cross machines, less than a flat ring") {
  const int64_t m = 1 << 14;  // floats per rank's block
  for (const std::string algorithm : {"hierarchical", "ring"}) {
    std::vector<uint64_t> gather(4), scatter(4), bcast(4);
    on_machines(
        "AABB",
        [&](ProcessGroupTCP& g) {
          const int r = g.rank();
          uint64_t before = g.bytes_sent();
          Tensor all = empty({4 * m});
          g.all_gather_into_tensor(all, full({m}, double(r))).wait();
          gather[size_t(r)] = g.bytes_sent() - before;
          before = g.bytes_sent();
          Tensor out = empty({m});
          g.reduce_scatter(out, full({4 * m}, 1.0)).wait();
          scatter[size_t(r)] = g.bytes_sent() - before;
          before = g.bytes_sent();
          Tensor b = full({4 * m}, double(r));
          g.broadcast(b, 1).wait();
          bcast[size_t(r)] = g.bytes_sent() - before;
        },
        algorithm);
    const double total = 4.0 * m * 4;  // bytes of the gathered result
    INFO(algorithm << ": gather " << gather[0] << " " << gather[1] << " " << gather[2] << " " << gather[3]);
    if (algorithm == "hierarchical") {
      // Leaders (0, 2) send (2-1)/2 of the result over the network; the others nothing.
      for (int r : {0, 2}) {
        CHECK(double(gather[size_t(r)]) >= total / 2);
        CHECK(double(gather[size_t(r)]) < total / 2 * 1.01);
        CHECK(double(scatter[size_t(r)]) >= total / 2);
        CHECK(double(scatter[size_t(r)]) < total / 2 * 1.01);
      }
      CHECK(gather[1] + gather[3] + scatter[1] + scatter[3] == 0);
      // Broadcast from rank 1 (machine A): one copy to machine B's leader, then its ack.
      CHECK(double(bcast[1]) >= total);
      CHECK(double(bcast[1]) < total * 1.01);
      CHECK(bcast[0] == 0);
      CHECK(bcast[3] == 0);
    } else {
      // The flat ring: every rank sends (4-1)/4 of the result; the root sends 3 copies.
      for (int r = 0; r < 4; ++r) CHECK(double(gather[size_t(r)]) >= total * 3 / 4);
      CHECK(double(bcast[1]) >= 3 * total);
    }
  }
}

TEST_CASE(
    "hierarchical reduce: dst gets every op's closed form on every layout, root and dtype; the others keep theirs") {
  for (const std::string machines : {"AABB", "AAAB", "ABAB", "AABBB", "BAAB"})
    for (DType dtype : {DType::Float32, DType::Int64, DType::BFloat16})
      for (int64_t n : {int64_t(0), int64_t(1), int64_t(7), int64_t((1 << 14) + 3)}) {
        INFO(machines << " " << dtype_name(dtype) << " n " << n);
        on_machines(machines, [&](ProcessGroupTCP& g) {
          RANK_REQUIRE(g.all_reduce_algorithm() == "hierarchical");
          const int w = g.size();
          for (int dst = 0; dst < w; ++dst)
            for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max}) {
              if (op == ReduceOp::Avg && dtype == DType::Int64) continue;
              const Tensor before = input(g.rank(), n, dtype);
              Tensor t = before.clone();
              g.reduce(t, dst, op).wait();
              const std::vector<float> got = t.to(DType::Float32).to_vector<float>();
              if (g.rank() != dst) {
                RANK_REQUIRE(got == before.to(DType::Float32).to_vector<float>());
                continue;
              }
              const double tolerance = dtype == DType::BFloat16 ? 0x1p-7 * w : 1e-6;
              for (int64_t i = 0; i < n; ++i) {
                const double want = closed_form(op, w, i);
                RANK_REQUIRE(std::fabs(got[size_t(i)] - want) <= tolerance * std::fabs(want));
              }
            }
        });
      }
}

TEST_CASE("hierarchical reduce: only leaders cross machines, fewer bytes into dst's machine than a flat ring") {
  const int64_t n = 1 << 16;  // floats
  const double total = double(n) * 4;
  for (const std::string algorithm : {"hierarchical", "ring"}) {
    std::vector<uint64_t> sent(4);
    on_machines(
        "AABB",
        [&](ProcessGroupTCP& g) {
          const uint64_t before = g.bytes_sent();
          Tensor t = input(g.rank(), n);
          g.reduce(t, 1).wait();
          sent[size_t(g.rank())] = g.bytes_sent() - before;
        },
        algorithm);
    INFO(algorithm << ": sent " << sent[0] << " " << sent[1] << " " << sent[2] << " " << sent[3]);
    if (algorithm == "hierarchical") {
      // The leaders' ring (2 machines): each leader sends (2-1)/2 of the tensor twice.
      for (int r : {0, 2}) {
        CHECK(double(sent[size_t(r)]) >= total);
        CHECK(double(sent[size_t(r)]) < total * 1.01);
      }
      CHECK(sent[1] + sent[3] == 0);
    } else {
      // Machine B's ranks: 3/4 in the ring's reduce-scatter, then their finished quarter to dst.
      for (int r : {2, 3}) CHECK(double(sent[size_t(r)]) >= total * (3.0 / 4 + 1.0 / 4));
    }
  }
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
