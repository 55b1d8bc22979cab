// Failures while the ranks set up, each named within a bounded time and leaving nothing
// behind: a process with another job's token, idle, slow and garbage connections to a
// rank's listener, a peer that hangs up mid-hello, and a rank that never joins (or dies
// before) a shared buffer's setup. Failures during collectives are in faults_test.cc.
#include <netinet/in.h>
#include <netinet/tcp.h>

#include <cstring>
#include <filesystem>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/shm_allreduce.h"
#include "dist/tcp_wire.h"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"
#include "tests/testing/held_port.h"

using namespace engine;
using namespace engine::dist;
using namespace engine::testing;
using namespace std::chrono_literals;

TEST_CASE("a process with another job's token cannot join the mesh") {
  const int port = engine::testing::held_port();
  auto results = run_processes(2, [port](int rank, int fd) {
    StoreOptions so;
    so.timeout = 3s;
    so.token = "job-A";  // both use the store with the right token...
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
    TCPGroupOptions go;
    go.timeout = 3s;
    go.token = rank == 0 ? "job-A" : "job-B";  // ...but rank 1 presents another token to its peer
    try {
      ProcessGroupTCP g(store, rank, 2, go);
    } catch (const Error& e) {
      (void)!write(fd, e.what(), std::strlen(e.what()));
      return 4;
    }
    return 0;
  });
  bool named = false;
  for (auto& r : results) {
    RANK_REQUIRE(r.exit_code == 4);
    named = named || r.output.find("another job's token") != std::string::npos;
  }
  RANK_REQUIRE(named);
}

TEST_CASE("idle, slow and garbage connections to a rank's listener during the rendezvous hold up no one") {
  // Strangers reach rank 0's listener before rank 1 does: 20 that connect and say nothing,
  // one that sends half a hello, one that sends an HTTP request, one with a huge token
  // length. Each used to hold rank 0 until the group's timeout, one after another.
  int port = 0;
  auto server = serve_store(&port, 10s);
  StoreOptions so;
  so.timeout = 10s;
  TCPGroupOptions go;
  go.timeout = 10s;
  std::vector<double> sums(2, 0);
  std::vector<std::string> errors(2);
  auto rank = [&](int r, std::shared_ptr<TCPStore> store) {
    try {
      ProcessGroupTCP g(store, r, 2, go);
      Tensor t = ones({1});
      g.all_reduce(t).wait();
      sums[size_t(r)] = t.item();
    } catch (const Error& e) {
      errors[size_t(r)] = e.what();
    }
  };
  const auto t0 = std::chrono::steady_clock::now();
  std::thread rank0(rank, 0, server);
  auto client = std::make_shared<TCPStore>("127.0.0.1", port, false, so);
  const std::string addr = client->get("tcp/addr/0");
  const std::string host = addr.substr(0, addr.rfind(':'));
  const int listen_port = std::stoi(addr.substr(addr.rfind(':') + 1));
  std::vector<Socket> strangers;
  for (int i = 0; i < 23; ++i) strangers.push_back(Socket::connect(host, listen_port, deadline_in(2s), "rank 0"));
  const uint32_t half = 0x12345678u;
  strangers[20].send_all(&half, 2, deadline_in(1s), "rank 0");
  const std::string http = "GET / HTTP/1.0\r\n\r\n";
  strangers[21].send_all(http.data(), http.size(), deadline_in(1s), "rank 0");
  const uint32_t huge[3] = {wire::kMagic, 1, 1u << 30};  // a hello announcing a 1 GiB token
  strangers[22].send_all(huge, sizeof huge, deadline_in(1s), "rank 0");
  std::this_thread::sleep_for(200ms);  // let rank 0 take them all in before rank 1 comes
  std::thread rank1(rank, 1, client);
  rank0.join(), rank1.join();
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  INFO("rank 0: " << errors[0] << "\nrank 1: " << errors[1]);
  REQUIRE(sums == std::vector<double>{2, 2});
  REQUIRE(seconds < 5);  // the timeout is 10 s
}

TEST_CASE("a rank that hangs up after its hello, failing for a reason in the store: rank 0 reports that reason") {
  // Rank 1 sent its hello, then read another rank's failure from the store and exited
  // before rank 0 answered. Rank 0's answer then meets a closed connection; it must report
  // the reason every other rank reports, not the connection it happened to lose.
  int port = 0;
  auto server = serve_store(&port, 10s);
  TCPGroupOptions go;
  go.timeout = 10s;
  go.token = "job-A";  // a hello in two writes: the second meets the reset
  std::string error;
  std::thread rank0([&] {
    try {
      ProcessGroupTCP g(server, 0, 2, go);
    } catch (const Error& e) {
      error = e.what();
    }
  });
  StoreOptions so;
  so.timeout = 10s;
  TCPStore client("127.0.0.1", port, false, so);
  const std::string addr = client.get("tcp/addr/0");
  const std::string why = "[init_process_group] rank 3 listens at 127.0.0.1:1, a loopback address";
  client.set("tcp/error", why);
  client.add("tcp/error_read", 1);
  {
    Socket s = Socket::connect(addr.substr(0, addr.rfind(':')), std::stoi(addr.substr(addr.rfind(':') + 1)),
                               deadline_in(2s), "rank 0");
    const int on = 1;  // hello and hang-up leave together: rank 0 cannot answer in between
    setsockopt(s.fd(), IPPROTO_TCP, TCP_CORK, &on, sizeof on);
    const uint32_t hello[3] = {wire::kMagic, 1, uint32_t(go.token.size())};
    s.send_all(hello, sizeof hello, deadline_in(1s), "rank 0");
    s.send_all(go.token.data(), go.token.size(), deadline_in(1s), "rank 0");
  }  // hung up before rank 0 answers
  rank0.join();
  REQUIRE(error == why);
}
namespace {
// A token no other process uses: shared-memory names start with the job's tag, and the
// pid in them is not enough to tell whose a name is, since sandboxed tests (each in its
// own PID namespace) share /dev/shm and the same small pids.
std::string unique_token(const char* what) {
  return std::string(what) + "-" + std::to_string(getpid()) + "-" +
         std::to_string(std::chrono::steady_clock::now().time_since_epoch().count());
}

// The /dev/shm names of the job with this token.
std::vector<std::string> shm_names_of(const std::string& token) {
  std::vector<std::string> names;
  const std::string prefix = "engine-" + shm_job_tag(token) + "-";
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec)) {
    const std::string n = it->path().filename().string();
    if (n.rfind(prefix, 0) == 0) names.push_back(n);
  }
  return names;
}
}  // namespace

TEST_CASE("a rank that never joins a shared buffer's setup is named at the timeout, and no segment is left") {
  const auto t0 = std::chrono::steady_clock::now();
  const std::string token = unique_token("never-joins");
  std::string error;
  run_threads_with(
      2,
      [&token](int, TCPGroupOptions& o) {
        o.token = token;
        o.timeout = 1s;
      },
      [&error](ProcessGroupTCP& g) {
        if (g.rank() == 1) {
          g.barrier().wait();                   // the barrier shared_buffer starts with...
          std::this_thread::sleep_for(2500ms);  // ...but not the setup itself
          return;
        }
        try {
          (void)g.shared_buffer(1024);
        } catch (const Error& e) {
          error = e.what();
        }
      },
      1s);
  RANK_REQUIRE_THAT(error, Catch::Contains("timed out after 1 s setting up a shared buffer on rank 0") &&
                               Catch::Contains("rank 1 never attached"));
  RANK_REQUIRE(std::chrono::steady_clock::now() - t0 < 5s);
  RANK_REQUIRE(shm_names_of(token).empty());
}

TEST_CASE("a rank killed before a shared buffer's setup is named within seconds, and no segment is left") {
  const int port = engine::testing::held_port();
  const std::string token = unique_token("killed-before-setup");
  auto results = run_processes(2, [port, &token](int rank, int fd) {
    StoreOptions so;
    so.timeout = 30s;
    auto store = std::make_shared<TCPStore>("127.0.0.1", port, rank == 0, so);
    TCPGroupOptions go;
    go.token = token;
    go.timeout = 30s;  // far longer than the bound below: the error must come from seeing the death
    ProcessGroupTCP g(store, rank, 2, go);
    if (rank == 1) {
      g.barrier().wait();
      raise(SIGKILL);
    }
    try {
      (void)g.shared_buffer(1 << 20);
    } catch (const Error& e) {
      (void)!write(fd, e.what(), std::strlen(e.what()));
      return 3;
    }
    return 0;
  });
  INFO("rank 0: " << results[0].output);
  RANK_REQUIRE(results[1].exit_code == -SIGKILL);
  RANK_REQUIRE(results[0].exit_code == 3);
  RANK_REQUIRE_THAT(results[0].output, Catch::Contains("rank 1 (pid") &&
                                           Catch::Contains("died while the ranks were setting up a shared buffer"));
  RANK_REQUIRE(results[0].seconds < 10);
  RANK_REQUIRE(shm_names_of(token).empty());
}
