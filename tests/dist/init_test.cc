// dist::init_process_group with each init method and launcher environment, the errors for
// bad configuration, and a destroy_process_group that leaves nothing behind. The file://
// rendezvous at its edges: file_rendezvous_test.cc.
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>

#include <cstring>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/dist.h"
#include "tensor/ops.h"
#include "tests/dist/launch_env.h"
#include "tests/dist/ranks.h"
#include "tests/testing/held_port.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::testing;
using namespace std::chrono_literals;

namespace {
int count_entries(const char* dir) {
  int n = 0;
  if (DIR* d = opendir(dir)) {
    while (readdir(d)) ++n;
    closedir(d);
  }
  return n;
}

// Each child: init with the environment `setup` gives it, sum its rank, report, destroy.
std::vector<ChildResult> run_job(int world, const std::function<void(int rank)>& setup,
                                 const dist::InitOptions& options = {}) {
  return run_processes(world, [&](int rank, int fd) {
    clear_launch_env();
    setup(rank);
    dist::init_process_group("gloo", options);
    Tensor t = full({3}, double(dist::get_rank() + 1));
    dist::all_reduce(t);
    report(fd, "rank=" + std::to_string(dist::get_rank()) + " world=" + std::to_string(dist::get_world_size()) +
                   " local=" + std::to_string(dist::get_local_rank()) + " sum=" + std::to_string(int(t.at({0}))));
    dist::destroy_process_group();
    return 0;
  });
}
}  // namespace

TEST_CASE("env:// with torchrun's variables") {
  const int port = free_port();
  auto res = run_job(3, [port](int rank) {
    setenv("RANK", std::to_string(rank).c_str(), 1);
    setenv("WORLD_SIZE", "3", 1);
    setenv("LOCAL_RANK", std::to_string(rank).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  });
  for (int r = 0; r < 3; ++r) {
    INFO(res[size_t(r)].output);
    REQUIRE(res[size_t(r)].exit_code == 0);
    REQUIRE(res[size_t(r)].output == "rank=" + std::to_string(r) + " world=3 local=" + std::to_string(r) + " sum=6");
  }
}

TEST_CASE("Slurm's and Open MPI's variables launch the same program") {
  const int port = free_port();
  auto slurm = run_job(2, [port](int rank) {
    setenv("SLURM_PROCID", std::to_string(rank).c_str(), 1);
    setenv("SLURM_NTASKS", "2", 1);
    setenv("SLURM_LOCALID", std::to_string(rank).c_str(), 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  });
  for (auto& r : slurm) REQUIRE_THAT(r.output, Catch::EndsWith("world=2 local=" + r.output.substr(5, 1) + " sum=3"));
  const int port2 = free_port();
  auto mpi = run_job(2, [port2](int rank) {
    setenv("OMPI_COMM_WORLD_RANK", std::to_string(rank).c_str(), 1);
    setenv("OMPI_COMM_WORLD_SIZE", "2", 1);
    setenv("OMPI_COMM_WORLD_LOCAL_RANK", "0", 1);
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port2).c_str(), 1);
  });
  for (auto& r : mpi) REQUIRE_THAT(r.output, Catch::Contains("world=2") && Catch::Contains("sum=3"));
}

TEST_CASE("tcp:// and file:// init methods") {
  const int port = free_port();
  dist::InitOptions tcp;
  tcp.init_method = "tcp://127.0.0.1:" + std::to_string(port);
  tcp.world_size = 2;
  auto res = run_processes(2, [&](int rank, int fd) {
    clear_launch_env();
    dist::InitOptions o = tcp;
    o.rank = rank;
    dist::init_process_group("gloo", o);
    Tensor t = full({1}, 1.0);
    dist::all_reduce(t);
    report(fd, std::to_string(int(t.item())));
    dist::destroy_process_group();
    return 0;
  });
  for (auto& r : res) REQUIRE(r.output == "2");
  const std::string path = tmp_path("rendezvous");
  std::remove(path.c_str());
  auto fres = run_processes(3, [&](int rank, int fd) {
    clear_launch_env();
    dist::InitOptions o;
    o.init_method = "file://" + path;
    o.rank = rank;
    o.world_size = 3;
    dist::init_process_group("gloo", o);
    Tensor t = full({1}, 1.0);
    dist::all_reduce(t);
    report(fd, std::to_string(int(t.item())));
    dist::destroy_process_group();
    return 0;
  });
  for (auto& r : fres) REQUIRE(r.output == "3");
}

TEST_CASE("bad configuration says what to fix") {
  clear_launch_env();
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("RANK and WORLD_SIZE are not set"));
  setenv("RANK", "2", 1);
  setenv("WORLD_SIZE", "2", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("RANK=2 must be less than WORLD_SIZE=2"));
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "two", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("WORLD_SIZE=\"two\" is not an integer"));
  setenv("WORLD_SIZE", "1", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("MASTER_ADDR is not set"));
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("MASTER_PORT is not set"));
  REQUIRE_THROWS_WITH(dist::init_process_group("mpi"), Catch::Contains("unknown backend \"mpi\""));
  // A port that another process holds.
  dist::Listener holder = dist::Listener::bind("127.0.0.1", 0);
  setenv("MASTER_PORT", std::to_string(holder.port()).c_str(), 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("another process, perhaps another job, holds this port"));
  // An IPv6 rendezvous address: named as such, not as a name that cannot be resolved.
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
  for (const char* v6 : {"::1", "[::1]", "::ffff:127.0.0.1"}) {
    setenv("MASTER_ADDR", v6, 1);
    REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("is an IPv6 address") &&
                                                              Catch::Contains("speak IPv4 only") &&
                                                              Catch::Contains(v6));
  }
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  // nccl without a GPU (or without CUDA in the build) says so and points to gloo.
  REQUIRE_THROWS_WITH(dist::init_process_group("nccl"), Catch::Contains("nccl") && Catch::Contains("gloo"));
  REQUIRE_FALSE(dist::is_initialized());
  REQUIRE_THROWS_WITH(dist::get_rank(), Catch::Contains("not initialized"));
  clear_launch_env();
}

TEST_CASE("set but invalid RANK and WORLD_SIZE, and MASTER_PORT=0 for several ranks, are named as such") {
  clear_launch_env();
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
  setenv("RANK", "-1", 1);
  setenv("WORLD_SIZE", "2", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("RANK=-1 is invalid"));
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "0", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("WORLD_SIZE=0 is invalid"));
  setenv("WORLD_SIZE", "2", 1);
  setenv("MASTER_PORT", "0", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("MASTER_PORT=0 with WORLD_SIZE=2"));
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
  setenv("ENGINE_DIST_TIMEOUT", "99999999999", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("ENGINE_DIST_TIMEOUT=99999999999 is out of range"));
  setenv("ENGINE_DIST_TIMEOUT", "1000000", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("ENGINE_DIST_TIMEOUT must be a number of seconds"));
  unsetenv("ENGINE_DIST_TIMEOUT");
  setenv("LOCAL_RANK", "-3", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("LOCAL_RANK=-3 is invalid"));
  setenv("LOCAL_RANK", "2", 1);
  setenv("LOCAL_WORLD_SIZE", "2", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("LOCAL_RANK=2 and LOCAL_WORLD_SIZE=2 do not fit"));
  setenv("LOCAL_RANK", "0", 1);
  setenv("LOCAL_WORLD_SIZE", "0", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("LOCAL_WORLD_SIZE=0 do not fit"));
  unsetenv("LOCAL_WORLD_SIZE");
  setenv("WORLD_SIZE", "2000000", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"), Catch::Contains("WORLD_SIZE=2000000 is more ranks"));
  setenv("WORLD_SIZE", "1", 1);
  setenv("ENGINE_JOB_TOKEN", std::string(5000, 'a').c_str(), 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("the job token") && Catch::Contains("5000 bytes"));
  unsetenv("ENGINE_JOB_TOKEN");
  setenv("WORLD_SIZE", "2", 1);
  dist::InitOptions tcp;
  tcp.init_method = "tcp://127.0.0.1:0";
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo", tcp), Catch::Contains("has port 0 with world size 2"));
  REQUIRE_FALSE(dist::is_initialized());
  // A word the engine does not know turns nothing off silently ("off" is not "0").
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
  setenv("ENGINE_SHM", "off", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("ENGINE_SHM: expected \"0\" or \"1\", got \"off\""));
  REQUIRE_FALSE(dist::is_initialized());
  setenv("ENGINE_SHM", "0", 1);
  dist::init_process_group("gloo");
  dist::destroy_process_group();
  unsetenv("ENGINE_SHM");
  clear_launch_env();
}

namespace {
// Runs `world` processes whose environment `setup` gives, each timing out only after 60 s,
// and returns what each said (its error, or its sum).
std::vector<ChildResult> run_misconfigured(int world, const std::function<void(int child)>& setup,
                                           std::chrono::milliseconds hold = 0ms) {
  return run_processes(world, [&](int child, int fd) {
    clear_launch_env();
    setenv("ENGINE_DIST_TIMEOUT", "60", 1);
    setup(child);
    try {
      dist::init_process_group("gloo");
      std::this_thread::sleep_for(hold);  // a job that is still running
      Tensor t = full({1}, 1.0);
      dist::all_reduce(t);
      report(fd, "sum=" + std::to_string(int(t.item())));
      dist::destroy_process_group();
    } catch (const std::exception& e) {
      report(fd, e.what());
      return 1;
    }
    return 0;
  });
}
}  // namespace

namespace {
// Ranks 0 and 2 of 3 (rank 1 never starts) with rank 0's and rank 2's timeouts in seconds;
// rank 0 is killed after kill_rank0 when it is given. Returns what each said.
std::vector<ChildResult> rank_1_never_comes(const char* timeout0, const char* timeout2,
                                            std::chrono::seconds kill_rank0 = 0s) {
  const int port = free_port();
  return run_processes(3, [&](int child, int fd) {
    if (child == 1) return 0;
    env_for_rank(child, 3, port);
    setenv("ENGINE_DIST_TIMEOUT", child == 0 ? timeout0 : timeout2, 1);
    dup2(fd, STDERR_FILENO);  // what the rank says while it waits, reported too
    if (child == 0 && kill_rank0 > 0s)
      std::thread([kill_rank0] {
        std::this_thread::sleep_for(kill_rank0);
        raise(SIGKILL);
      }).detach();
    try {
      dist::init_process_group("gloo");
    } catch (const std::exception& e) {
      report(fd, e.what());
      return 1;
    }
    return 0;
  });
}
}  // namespace

TEST_CASE("a rank that never comes is named by every rank that did, rank 0's timeout told before its store closes") {
  // Rank 0 gives up after 2 s; rank 2 would wait 60 s. Before, rank 0's exit closed the
  // store under rank 2, which said only that the connection closed.
  auto res = rank_1_never_comes("2", "60");
  for (int child : {0, 2}) {
    INFO("child " << child << ": " << res[child].output);
    REQUIRE(res[child].exit_code == 1);
    REQUIRE_THAT(res[child].output, Catch::Contains("rank 0 timed out waiting for rank(s) 1 to connect"));
    REQUIRE(res[child].seconds < 10);
  }
  // Rank 0 said whom it waited for before it gave up, a third of its timeout in (10 s in
  // at the default 300 s): before, a job with a machine never started stayed silent.
  REQUIRE_THAT(res[0].output, Catch::Contains("[init_process_group] rank 0 has waited 0.") &&
                                  Catch::Contains(" s for rank(s) 1 to connect (2 of 3 have; it waits up to 2 s, "
                                                  "ENGINE_DIST_TIMEOUT): start them if they have not been"));
  REQUIRE(res[0].output.find("has waited") < res[0].output.find("timed out waiting"));
  // Rank 0 killed instead, 1 s into its wait: rank 2 names the rank it was waiting for.
  res = rank_1_never_comes("60", "60", 1s);
  INFO(res[2].output);
  REQUIRE(res[2].exit_code == 1);
  REQUIRE_THAT(res[2].output, Catch::Contains("rank 2 was waiting for rank 1 to connect: ") &&
                                  Catch::Contains("rendezvous store (rank 0) closed"));
  REQUIRE(res[2].seconds < 10);
}

TEST_CASE("ranks that disagree on WORLD_SIZE fail within seconds, naming both sizes and the ranks") {
  const int port = free_port();
  auto res = run_misconfigured(3, [port](int child) {
    setenv("RANK", std::to_string(child).c_str(), 1);
    setenv("WORLD_SIZE", child == 1 ? "2" : "3", 1);  // rank 1 thinks the job has 2 ranks
    setenv("MASTER_ADDR", "127.0.0.1", 1);
    setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
  });
  for (auto& r : res) {
    INFO(r.output);
    REQUIRE(r.exit_code == 1);
    REQUIRE_THAT(r.output, Catch::Contains("ranks disagree on WORLD_SIZE") && Catch::Contains("has 3") &&
                               Catch::Contains("has 2"));
    REQUIRE(r.seconds < 10);  // the timeout is 60 s
  }
}

TEST_CASE("ranks asked for different all-reduces fail within seconds, every one naming the same two") {
  // Rank 2 alone was given ENGINE_ALLREDUCE=ring (a machine whose launcher's environment
  // had it), then ENGINE_SHM=0: before, its first collective met the others' shared memory,
  // and all waited out the timeout.
  for (const char* setting : {"ENGINE_ALLREDUCE=ring", "ENGINE_SHM=0"}) {
    const int port = free_port();
    auto res = run_misconfigured(3, [port, setting](int child) {
      setenv("RANK", std::to_string(child).c_str(), 1);
      setenv("WORLD_SIZE", "3", 1);
      setenv("MASTER_ADDR", "127.0.0.1", 1);
      setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
      const std::string s = setting;
      if (child == 2) setenv(s.substr(0, s.find('=')).c_str(), s.substr(s.find('=') + 1).c_str(), 1);
    });
    const std::string theirs = std::string(setting) == "ENGINE_SHM=0"
                                   ? "rank 2 has ENGINE_ALLREDUCE=auto with shared memory off (ENGINE_SHM=0)"
                                   : "rank 2 has ENGINE_ALLREDUCE=ring";
    for (auto& r : res) {
      INFO(setting << ": " << r.output);
      REQUIRE(r.exit_code == 1);
      REQUIRE_THAT(r.output, Catch::Contains("ranks disagree on the all-reduce: rank 0 has ENGINE_ALLREDUCE=auto, " +
                                             theirs + "; give every rank the same ENGINE_ALLREDUCE and ENGINE_SHM"));
      REQUIRE(r.seconds < 10);  // the timeout is 60 s
    }
  }
}

TEST_CASE(
    "a bad ENGINE_PORT_RANGE, ENGINE_LINK_TIMEOUT or ENGINE_SOCKET_IFNAME on one rank is named by every rank, with "
    "that rank") {
  // On rank 0 alone (one machine's environment), then on rank 2 alone. Before, rank 0's
  // error ended the store, and the others said only that its connection had closed (for
  // ENGINE_SOCKET_IFNAME, rank 1's said it "was waiting for rank 1"); and they did not say
  // which rank, on which machine, had the bad value.
  struct Bad {
    const char *variable, *value, *error;
  };
  for (const Bad& v : {Bad{"ENGINE_PORT_RANGE", "29600-29500",
                           "ENGINE_PORT_RANGE's high port: expected an integer in [29600, 65535], got \"29500\""},
                       Bad{"ENGINE_LINK_TIMEOUT", "-1",
                           "environment variable ENGINE_LINK_TIMEOUT: expected an integer in [0, 32767], got \"-1\""},
                       Bad{"ENGINE_SOCKET_IFNAME", "eth9",
                           "ENGINE_SOCKET_IFNAME=eth9: no interface of that name with an IPv4 address here; this "
                           "machine has: lo (127.0.0.1)"}})
    for (int bad : {0, 2}) {
      INFO(v.variable << "=" << v.value << " on rank " << bad);
      const int port = free_port();
      auto res = run_misconfigured(3, [port, bad, v](int child) {
        env_for_rank(child, 3, port);
        if (child == bad) setenv(v.variable, v.value, 1);
      });
      for (auto& r : res) {
        INFO(r.output);
        REQUIRE(r.exit_code == 1);
        REQUIRE_THAT(r.output, Catch::Contains(v.error));
        REQUIRE_THAT(r.output, Catch::Contains("[init_process_group] rank " + std::to_string(bad) + " (on "));
        REQUIRE(r.seconds < 10);  // the timeout is 60 s
      }
    }
}

TEST_CASE("two processes with the same RANK: the second claimant is refused within seconds, naming both") {
  const int port = free_port();
  auto res = run_misconfigured(
      3,
      [port](int child) {
        setenv("RANK", child == 0 ? "0" : "1", 1);  // children 1 and 2 both say RANK=1
        setenv("WORLD_SIZE", "2", 1);
        setenv("MASTER_ADDR", "127.0.0.1", 1);
        setenv("MASTER_PORT", std::to_string(port).c_str(), 1);
        if (child == 2) std::this_thread::sleep_for(300ms);  // the late one: the job has passed its rendezvous
      },
      /*hold=*/1500ms);
  for (auto& r : res) {
    INFO(r.output);
    REQUIRE(r.seconds < 10);  // the timeout is 60 s
  }
  INFO(res[2].output);
  REQUIRE(res[2].exit_code == 1);
  REQUIRE_THAT(res[2].output, Catch::Contains("two processes claim RANK=1: pid " + std::to_string(res[1].pid)) &&
                                  Catch::Contains("every process needs its own RANK"));
}

TEST_CASE("destroy_process_group leaves no thread, socket or port; a collective after it is an error") {
  const int port = free_port();
  auto res = run_processes(2, [port](int rank, int fd) {
    env_for_rank(rank, 2, port);
    const int threads0 = count_entries("/proc/self/task"), fds0 = count_entries("/proc/self/fd");
    dist::init_process_group("gloo");
    const int threads1 = count_entries("/proc/self/task");
    Tensor t = ones({4});
    dist::all_reduce(t);
    dist::destroy_process_group();
    const int threads2 = count_entries("/proc/self/task"), fds2 = count_entries("/proc/self/fd");
    std::string after;
    try {
      dist::all_reduce(t);
    } catch (const Error& e) {
      after = e.what();
    }
    // Rank 0 served the store on MASTER_PORT: the port must be free again.
    bool port_free = true;
    if (rank == 0) {
      std::this_thread::sleep_for(100ms);
      try {
        dist::Listener::bind("127.0.0.1", port);
      } catch (const Error&) {
        port_free = false;
      }
    }
    report(fd, "threads " + std::to_string(threads0) + "->" + std::to_string(threads1) + "->" +
                   std::to_string(threads2) + " fds " + std::to_string(fds0) + "->" + std::to_string(fds2) +
                   " port_free " + std::to_string(port_free) + " after: " + after);
    return threads2 == threads0 && fds2 == fds0 && port_free ? 0 : 5;
  });
  for (auto& r : res) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE_THAT(r.output, Catch::Contains("not initialized"));
  }
}
