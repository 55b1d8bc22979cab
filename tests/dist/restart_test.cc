// Process groups across restarts and re-initialisation: a restarted rank never joins the
// failed attempt's store, a machine whose launcher was started afresh joins the restart the
// job is in (either side of the store, and when it comes back before the job noticed it
// was lost), and init, destroy, init again at once.
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/dist.h"
#include "tensor/ops.h"
#include "tests/dist/launch_env.h"
#include "tests/dist/ranks.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using namespace engine::testing;
using namespace std::chrono_literals;

namespace {
// Waits (up to 60 s) until another child has created `path`, the mark of a moment.
void wait_for(const std::string& path) {
  for (int i = 0; i < 6000 && access(path.c_str(), F_OK) != 0; ++i) std::this_thread::sleep_for(10ms);
}

// A formed group's rank 0 that is failing but not yet gone: up 1.5 s more, then killed
// (SIGKILL, not _exit: a sanitizer's _exit can take long, holding the port). `leaving`
// marks the moment it goes.
[[noreturn]] void linger_then_die(const std::string& leaving) {
  std::this_thread::sleep_for(1500ms);
  std::ofstream(leaving).put('1');
  raise(SIGKILL);
  std::abort();
}
}  // namespace

TEST_CASE("a rank of a restarted job waits for its own attempt's store, never joining the failed attempt's") {
  // Children 0 and 3: ranks 0 and 1 of attempt 0, a formed group. Rank 1 dies (its
  // machine's launcher restarts); rank 0 is failing but still up for 1.5 s. Child 1: rank 1
  // of attempt 1, which reaches child 0's store first. Child 2: rank 0 of attempt 1, started
  // once child 0 has gone, on the same port. Child 1 must wait for child 2, never join the
  // failed attempt. Files mark the moments, so that a slow (sanitizer) build keeps the order.
  const int port = free_port();
  const std::string formed = tmp_path("attempt0_formed"), leaving = tmp_path("attempt0_leaving");
  std::remove(formed.c_str()), std::remove(leaving.c_str());
  auto res = run_processes(4, [&](int child, int fd) {
    clear_launch_env();
    env_for_rank(child == 0 || child == 2 ? 0 : 1, 2, port);
    setenv("TORCHELASTIC_RESTART_COUNT", child == 0 || child == 3 ? "0" : "1", 1);
    setenv("ENGINE_DIST_TIMEOUT", "30", 1);
    if (child == 1) wait_for(formed);
    if (child == 2) wait_for(leaving), std::this_thread::sleep_for(200ms);
    try {
      dist::init_process_group("gloo");
      Tensor t = full({1}, 1.0);
      dist::all_reduce(t);
      report(fd, "sum=" + std::to_string(int(t.item())) + " restart=" + std::to_string(dist::restart_count()));
      if (child == 3) raise(SIGKILL);  // attempt 0's rank 1 dies
      if (child == 0) std::ofstream(formed).put('1'), linger_then_die(leaving);
      dist::destroy_process_group();
    } catch (const std::exception& e) {
      report(fd, e.what());
      return 1;
    }
    return 0;
  });
  INFO("attempt 0: " << res[0].output << " / " << res[3].output);
  REQUIRE(res[0].output == "sum=2 restart=0");
  REQUIRE(res[3].output == "sum=2 restart=0");
  INFO("attempt 1: " << res[1].output << " / " << res[2].output);
  REQUIRE(res[1].exit_code == 0);
  REQUIRE(res[2].exit_code == 0);
  REQUIRE(res[1].output == "sum=2 restart=1");
  // A restart count that is not a count is named.
  clear_launch_env();
  setenv("RANK", "0", 1);
  setenv("WORLD_SIZE", "1", 1);
  setenv("MASTER_ADDR", "127.0.0.1", 1);
  setenv("MASTER_PORT", std::to_string(free_port()).c_str(), 1);
  setenv("TORCHELASTIC_RESTART_COUNT", "70000", 1);
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo"),
                      Catch::Contains("TORCHELASTIC_RESTART_COUNT=70000 is out of range (0 to 65535)"));
  clear_launch_env();
}

TEST_CASE("a machine whose launcher was started afresh joins the restart the job is in") {
  // A machine lost and restarted while the others' launchers restarted the job twice: its
  // launcher starts at restart 0, the others' ranks are at restart 2. Whether it is the
  // machine of rank 1 (it joins the store's restart) or of rank 0 (its store, still
  // forming, takes up the restart the others come with), the group forms, and every rank's
  // dist::restart_count() is 2; destroyed and initialised again, it stays there. Before,
  // the ranks behind retried until the timeout.
  for (int afresh : {1, 0}) {
    INFO("the rank started afresh: " << afresh);
    const int port = free_port();
    auto res = run_processes(2, [port, afresh](int rank, int fd) {
      clear_launch_env();
      env_for_rank(rank, 2, port);
      setenv("TORCHELASTIC_RESTART_COUNT", rank == afresh ? "0" : "2", 1);
      setenv("ENGINE_DIST_TIMEOUT", "20", 1);
      if (rank != afresh) std::this_thread::sleep_for(200ms);  // the machine started afresh is first
      try {
        for (int round = 0; round < 2; ++round) {
          dist::init_process_group("gloo");
          Tensor t = full({1}, 1.0);
          dist::all_reduce(t);
          report(fd,
                 "restart=" + std::to_string(dist::restart_count()) + " sum=" + std::to_string(int(t.item())) + ";");
          dist::destroy_process_group();
        }
      } catch (const std::exception& e) {
        report(fd, e.what());
        return 1;
      }
      return 0;
    });
    INFO(res[0].output << " / " << res[1].output);
    for (auto& r : res) {
      REQUIRE(r.exit_code == 0);
      REQUIRE(r.output == "restart=2 sum=2;restart=2 sum=2;");
      REQUIRE(r.seconds < 10);
    }
  }
  // Never another process group of the program: a rank that has made one more before is
  // named at the deadline, with both incarnations.
  const int port = free_port();
  auto res = run_processes(2, [port](int rank, int fd) {
    clear_launch_env();
    setenv("ENGINE_DIST_TIMEOUT", "2", 1);
    try {
      if (rank == 1) {  // one group of its own first, alone
        env_for_rank(0, 1, free_port());
        dist::init_process_group("gloo");
        dist::destroy_process_group();
      }
      env_for_rank(rank, 2, port);
      setenv("TORCHELASTIC_RESTART_COUNT", rank == 0 ? "2" : "0", 1);
      dist::init_process_group("gloo");
      dist::destroy_process_group();
    } catch (const std::exception& e) {
      report(fd, e.what());
      return 1;
    }
    return 0;
  });
  INFO(res[1].output);
  REQUIRE(res[1].exit_code == 1);
  REQUIRE_THAT(res[1].output,
               Catch::Contains("kept serving another process group of this job (the launcher's restart 2 after") &&
                   Catch::Contains("than this process's (the launcher's restart 0 after"));
  // In a restart, the rank that waits for a machine that never comes says how it can join.
  clear_launch_env();
  env_for_rank(0, 2, free_port());
  setenv("TORCHELASTIC_RESTART_COUNT", "1", 1);
  dist::InitOptions o;
  o.timeout = 500ms;
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                      Catch::Contains("timed out waiting for rank(s) 1 to connect") &&
                          Catch::Contains("a machine that was lost whole joins it when its launcher is started again"));
  clear_launch_env();
}

TEST_CASE("a machine restarted before the others noticed waits for the job's restart, then joins it") {
  // Children 0 and 1: ranks 0 and 1 of attempt 0, started by launchers A and B, a formed
  // group. Child 1 dies (its machine failed); child 0 has not noticed yet and goes on for
  // 1.5 s. Child 2: rank 1 again, from launcher C, started afresh on the restarted machine
  // (restart 0): it meets attempt 0's store, its rank held by the dead child 1. Child 3:
  // rank 0 of the job's restart 1, once child 0 has gone. Child 2 must wait, then join
  // restart 1. Before, it failed at once ("two processes claim RANK=1") and the machine's
  // launcher spent a restart on it. A live holder on this machine is still a duplicate.
  // Third case: the machine fails in the program's second process group (children 0 and 1
  // made and destroyed one before), so the group child 2 meets is another one of the
  // program, not only another attempt: child 2 still waits, and joins restart 1's first.
  for (const auto& [holder_lives, second_group] : {std::pair{false, false}, {true, false}, {false, true}}) {
    INFO("the holder of rank 1 " << (holder_lives ? "lives" : "is dead")
                                 << (second_group ? ", in the program's second process group" : ""));
    const int port = free_port();
    const std::string lost = tmp_path("held_lost"), leaving = tmp_path("held_leaving");
    for (const auto& f : {lost, leaving}) std::remove(f.c_str());
    auto res = run_processes(4, [&](int child, int fd) {
      env_for_rank(child == 0 || child == 3 ? 0 : 1, 2, port);
      setenv("ENGINE_LAUNCH_ID", std::string(1, "ABCD"[child]).c_str(), 1);
      setenv("GROUP_RANK", child == 0 || child == 3 ? "0" : "1", 1);
      setenv("TORCHELASTIC_RESTART_COUNT", child == 3 ? "1" : "0", 1);
      setenv("ENGINE_DIST_TIMEOUT", "30", 1);
      if (child == 2) wait_for(lost), std::this_thread::sleep_for(100ms);
      if (child == 3) wait_for(leaving), std::this_thread::sleep_for(200ms);
      if (child == 3 && holder_lives) return 0;  // nothing to join: child 2 is refused
      const auto start = std::chrono::steady_clock::now();
      try {
        if (second_group && child < 2) {
          dist::init_process_group("gloo");
          dist::barrier();
          dist::destroy_process_group();
        }
        dist::init_process_group("gloo");
        Tensor t = full({1}, 1.0);
        dist::all_reduce(t);
        report(fd, "sum=" + std::to_string(int(t.item())) + " restart=" + std::to_string(dist::restart_count()));
        if (child == 1) {  // its machine fails: dead, not noticed (a zombie until the test reaps it)
          std::ofstream(lost).put('1');
          if (!holder_lives) raise(SIGKILL);
          std::this_thread::sleep_for(3s);
          raise(SIGKILL);
        }
        if (child == 0) linger_then_die(leaving);  // then its launcher restarts the job
        dist::destroy_process_group();
      } catch (const std::exception& e) {
        const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - start);
        report(fd, std::string(e.what()) + " [after " + std::to_string(ms.count()) + " ms]");
        return 1;
      }
      return 0;
    });
    INFO("child 2: " << res[2].output);
    if (holder_lives) {
      REQUIRE(res[2].exit_code == 1);
      REQUIRE_THAT(res[2].output, Catch::Contains("two processes claim RANK=1: pid " + std::to_string(res[1].pid)));
      // Refused while the holder lived (it lives 3 s after child 2 starts), not after a wait.
      const size_t at = res[2].output.rfind("[after ");
      REQUIRE(at != std::string::npos);
      REQUIRE(std::stol(res[2].output.substr(at + 7)) < 2500);
    } else {
      INFO("child 3: " << res[3].output);
      REQUIRE(res[2].exit_code == 0);
      REQUIRE(res[3].exit_code == 0);
      REQUIRE(res[2].output == "sum=2 restart=1");
      REQUIRE(res[3].output == "sum=2 restart=1");
    }
  }
}

TEST_CASE("init, destroy and init again at once: no rank joins the store rank 0 is closing") {
  // Rank 1 leaves destroy_process_group's barrier first and initialises again while rank 0
  // may still serve the old store on the same port: it must be told to retry, not served by
  // a store about to close (before: rank 1 failed, rank 0 waited out the whole timeout).
  const int port = free_port();
  const auto start = std::chrono::steady_clock::now();
  auto res = run_processes(2, [port](int rank, int fd) {
    env_for_rank(rank, 2, port);
    setenv("ENGINE_DIST_TIMEOUT", "20", 1);
    std::string sums;
    for (int round = 0; round < 5; ++round) {
      dist::init_process_group("gloo");
      Tensor t = full({2}, double(round + rank));
      dist::all_reduce(t);
      sums += std::to_string(int(t.at({0}))) + " ";
      dist::destroy_process_group();
    }
    report(fd, sums);
    return 0;
  });
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  for (auto& r : res) {
    INFO(r.output);
    REQUIRE(r.exit_code == 0);
    REQUIRE(r.output == "1 3 5 7 9 ");  // round + 0 and round + 1, summed
  }
  REQUIRE(seconds < 10);  // a bound far above the ~1 s it takes, far below the 20 s timeout
}
