// The launcher and signals: a rank stopped (SIGSTOP) for too long, and the launcher itself
// killed with kill -9, hung up on (SIGHUP) or sent SIGQUIT: no rank is left running, and the
// launcher says what happened.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using namespace engine::testing;  // run, Run, runfile, kLaunch, kProbe

TEST_CASE(
    "a rank stopped for longer than --stopped_timeout ends the job within seconds, not at the collective timeout") {
  const Run r =
      run("PROBE_STOP_RANK=1 ENGINE_DIST_TIMEOUT=120 " + kLaunch + " --nproc_per_node=3 --stopped_timeout=2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 128 + SIGSTOP);
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 1 (pid") &&
                             Catch::Contains("has been stopped for 2 s (SIGSTOP or SIGTSTP)"));
  REQUIRE(r.seconds < 15);  // the collective timeout is 120 s
}

namespace {
// The processes whose parent is `parent`, read from /proc.
std::vector<pid_t> children_of(pid_t parent) {
  std::vector<pid_t> found;
  for (const auto& entry : std::filesystem::directory_iterator("/proc")) {
    const std::string name = entry.path().filename();
    if (name.find_first_not_of("0123456789") != std::string::npos) continue;
    std::ifstream status(entry.path() / "status");
    for (std::string line; std::getline(status, line);)
      if (line.rfind("PPid:", 0) == 0 && std::stoi(line.substr(5)) == parent) found.push_back(std::stoi(name));
  }
  return found;
}

bool running(pid_t pid) {  // a zombie has ended; it only waits to be reaped
  std::ifstream status("/proc/" + std::to_string(pid) + "/status");
  for (std::string line; std::getline(status, line);)
    if (line.rfind("State:", 0) == 0) return line.find('Z') == std::string::npos;
  return false;
}

// A launcher with 2 ranks that hold for 60 s after the rendezvous, printing nothing, its
// output in `log`; returns once both ranks are past the rendezvous, with their pids.
pid_t start_holding_job(const std::string& log, std::vector<pid_t>* ranks) {
  const pid_t launcher = fork();
  if (launcher == 0) {
    setenv("PROBE_HOLD_MS", "60000", 1);
    if (!freopen(log.c_str(), "w", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(126);
    execl(kLaunch.c_str(), kLaunch.c_str(), "--nproc_per_node=2", kProbe.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; launcher > 0 && i < 200 && ranks->size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string text = engine::testing::read_bytes(log);
    if (text.find("[rank 0] attempt 0") != std::string::npos && text.find("[rank 1] attempt 0") != std::string::npos)
      *ranks = children_of(launcher);
  }
  return launcher;
}

// How many of `ranks` still run `limit` after the call, at the longest; kills any left.
int left_running(const std::vector<pid_t>& ranks, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  auto alive = [&] {
    int n = 0;
    for (pid_t r : ranks) n += running(r);
    return n;
  };
  while (alive() > 0 && std::chrono::steady_clock::now() - t0 < limit)
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const int left = alive();
  for (pid_t r : ranks)
    if (running(r)) kill(r, SIGKILL);  // whatever the outcome, leave nothing behind
  return left;
}
}  // namespace

TEST_CASE("ranks end when their launcher is killed with kill -9, instead of running on without it") {
  std::vector<pid_t> ranks;
  const pid_t launcher = start_holding_job(engine::testing::tmp_path("orphans.log"), &ranks);
  REQUIRE(launcher > 0);
  REQUIRE(ranks.size() == 2);
  kill(launcher, SIGKILL);
  waitpid(launcher, nullptr, 0);
  // SIGTERM at once (the ranks' parent-death signal); a loaded machine may take a while to run them.
  REQUIRE(left_running(ranks, std::chrono::seconds(5)) == 0);
}

TEST_CASE("a launcher whose terminal hangs up (SIGHUP) or that gets SIGQUIT stops its ranks and says so") {
  // torchrun stops its workers on SIGHUP and SIGQUIT as on SIGTERM; an ssh session that
  // drops sends the first. The launcher used to die of it at once, saying nothing.
  for (const int sig : {SIGHUP, SIGQUIT}) {
    const std::string log = engine::testing::tmp_path("hangup.log");
    std::vector<pid_t> ranks;
    const pid_t launcher = start_holding_job(log, &ranks);
    REQUIRE(launcher > 0);
    REQUIRE(ranks.size() == 2);
    kill(launcher, sig);
    int status = 0;
    waitpid(launcher, &status, 0);
    const int left = left_running(ranks, std::chrono::seconds(10));
    INFO(engine::testing::read_bytes(log));
    REQUIRE(left == 0);
    REQUIRE(WIFEXITED(status));
    REQUIRE(WEXITSTATUS(status) == 128 + sig);
    REQUIRE_THAT(engine::testing::read_bytes(log), Catch::Contains(std::string("launch: the launcher got signal ") +
                                                                   strsignal(sig) + "; the other ranks were stopped"));
  }
}
