// The launcher and signals: a rank stopped (SIGSTOP) for too long, and the launcher itself
// killed with kill -9, hung up on (SIGHUP) or sent SIGQUIT: no rank is left running, and the
// launcher says what happened. Told to stop (SIGTERM to the whole job, a scheduler's SIGUSR1
// warning), it passes the request on and the ranks have time to save; Ctrl-C twice ends them.
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

// A launcher with 2 ranks of the probe, with `env` (NAME=VALUE) set, in a process group of
// its own, its output in `log`; returns once both ranks have printed `ready`, with their pids.
// `ignored`: a signal the launcher starts ignoring (as nohup starts it ignoring SIGHUP);
// `blocked`: signals it starts with blocked.
pid_t start_job(const std::string& log, const std::string& env, const std::string& ready, std::vector<pid_t>* ranks,
                int ignored = 0, const std::vector<int>& blocked = {}) {
  const pid_t launcher = fork();
  if (launcher == 0) {
    setpgid(0, 0);  // as `timeout` and a batch scheduler start a job: its own group
    if (ignored) signal(ignored, SIG_IGN);
    sigset_t mask;
    sigemptyset(&mask);
    for (int sig : blocked) sigaddset(&mask, sig);
    sigprocmask(SIG_BLOCK, &mask, nullptr);
    putenv(const_cast<char*>(env.c_str()));
    if (!freopen(log.c_str(), "w", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(126);
    execl(kLaunch.c_str(), kLaunch.c_str(), "--nproc_per_node=2", kProbe.c_str(), nullptr);
    _exit(127);
  }
  for (int i = 0; launcher > 0 && i < 200 && ranks->size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    const std::string text = engine::testing::read_bytes(log);
    if (text.find("[rank 0] " + ready) != std::string::npos && text.find("[rank 1] " + ready) != std::string::npos)
      *ranks = children_of(launcher);
  }
  return launcher;
}

// Ranks that hold for 60 s after the rendezvous, printing nothing.
pid_t start_holding_job(const std::string& log, std::vector<pid_t>* ranks) {
  return start_job(log, "PROBE_HOLD_MS=60000", "attempt 0", ranks);
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
    REQUIRE_THAT(engine::testing::read_bytes(log),
                 Catch::Contains(std::string("launch: the launcher got signal ") + strsignal(sig) +
                                 " and passed SIGTERM on to the ranks: rank 0 was killed by signal 15 (Terminated)"));
  }
}

namespace {
// Waits for the launcher; returns its exit status (128 + the signal that ended it), or -1
// when it did not end within `limit` (then its whole group is killed).
int launcher_status(pid_t launcher, std::chrono::seconds limit) {
  const auto t0 = std::chrono::steady_clock::now();
  int status = 0;
  while (waitpid(launcher, &status, WNOHANG) == 0) {
    if (std::chrono::steady_clock::now() - t0 > limit) {
      kill(-launcher, SIGKILL);
      waitpid(launcher, nullptr, 0);
      return -1;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace

TEST_CASE("SIGTERM to the whole job (as `timeout` and Slurm send it) stops every rank on request, once") {
  // Every process of the job gets the scheduler's SIGTERM, and then the launcher passes its
  // own on: the second is the same request again. It used to end the ranks at once (the
  // handler had been taken off by the first), before they could save.
  const std::string log = engine::testing::tmp_path("group_term.log");
  std::vector<pid_t> ranks;
  const pid_t launcher = start_job(log, "PROBE_WAIT_STOP=1", "waiting to be stopped", &ranks);
  REQUIRE(launcher > 0);
  REQUIRE(ranks.size() == 2);
  kill(-launcher, SIGTERM);
  const int status = launcher_status(launcher, std::chrono::seconds(20));
  const std::string text = engine::testing::read_bytes(log);
  INFO(text);
  CHECK(left_running(ranks, std::chrono::seconds(5)) == 0);
  CHECK(status == 128 + SIGTERM);
  CHECK_THAT(text, Catch::Contains("[rank 0] stopped at call") && Catch::Contains("[rank 1] stopped at call") &&
                       Catch::Contains("launch: the launcher got signal Terminated and passed it on to the ranks: "
                                       "every rank stopped on request (status 143)"));
}

TEST_CASE("a scheduler's warning (SIGUSR1, SIGUSR2) to the launcher is passed on as it is, and the ranks stop on it") {
  for (const int sig : {SIGUSR1, SIGUSR2}) {
    const std::string name = sig == SIGUSR1 ? "SIGUSR1" : "SIGUSR2";
    const std::string log = engine::testing::tmp_path("usr.log");
    std::vector<pid_t> ranks;
    const pid_t launcher = start_job(log, "PROBE_WAIT_STOP=1", "waiting to be stopped", &ranks);
    REQUIRE(launcher > 0);
    REQUIRE(ranks.size() == 2);
    kill(launcher, sig);  // it used to end the launcher at once, saying nothing
    const int status = launcher_status(launcher, std::chrono::seconds(20));
    const std::string text = engine::testing::read_bytes(log);
    INFO(text);
    CHECK(left_running(ranks, std::chrono::seconds(5)) == 0);
    CHECK(status == 128 + sig);
    CHECK_THAT(text, Catch::Contains("[rank 0] stopped at call") && Catch::Contains("(" + name + ")") &&
                         Catch::Contains(std::string("launch: the launcher got signal ") + strsignal(sig) +
                                         " and passed it on to the ranks: every rank stopped on request (status 143)"));
  }
}

TEST_CASE("ranks told to stop have time to save, and a second Ctrl-C ends them at once") {
  const std::string log = engine::testing::tmp_path("deaf.log");
  std::vector<pid_t> ranks;
  const pid_t launcher = start_job(log, "PROBE_DEAF=1", "deaf", &ranks);
  REQUIRE(launcher > 0);
  REQUIRE(ranks.size() == 2);
  kill(launcher, SIGINT);
  std::this_thread::sleep_for(std::chrono::seconds(6));  // past the 5 s a failed job's ranks get
  int alive = 0;
  for (pid_t r : ranks) alive += running(r);
  CHECK(alive == 2);
  kill(launcher, SIGINT);
  const int status = launcher_status(launcher, std::chrono::seconds(10));
  INFO(engine::testing::read_bytes(log));
  CHECK(status == 128 + SIGINT);
  CHECK(left_running(ranks, std::chrono::seconds(1)) == 0);
  CHECK_THAT(engine::testing::read_bytes(log), Catch::Contains("rank 0 was killed by signal 9 (Killed)"));
}

TEST_CASE("a job started under nohup (SIGHUP ignored) outlives a hangup, and still stops on SIGTERM") {
  // An ssh session that drops sends SIGHUP to the job; nohup starts it ignoring SIGHUP. The
  // launcher used to put its own handler over that, and stopped the job.
  const std::string log = engine::testing::tmp_path("nohup.log");
  std::vector<pid_t> ranks;
  const pid_t launcher = start_job(log, "PROBE_WAIT_STOP=1", "waiting to be stopped", &ranks, SIGHUP);
  REQUIRE(launcher > 0);
  REQUIRE(ranks.size() == 2);
  kill(-launcher, SIGHUP);  // the launcher and its ranks
  std::this_thread::sleep_for(std::chrono::seconds(1));
  int alive = 0;
  for (pid_t r : ranks) alive += running(r);
  CHECK(alive == 2);
  CHECK(waitpid(launcher, nullptr, WNOHANG) == 0);
  CHECK_THAT(engine::testing::read_bytes(log), !Catch::Contains("stopped at call"));
  kill(-launcher, SIGTERM);
  const int status = launcher_status(launcher, std::chrono::seconds(20));
  INFO(engine::testing::read_bytes(log));
  CHECK(status == 128 + SIGTERM);
  CHECK(left_running(ranks, std::chrono::seconds(5)) == 0);
  CHECK_THAT(engine::testing::read_bytes(log), Catch::Contains("[rank 1] stopped at call") &&
                                                   Catch::Contains("(SIGTERM)") &&
                                                   Catch::Contains("every rank stopped on request (status 143)"));
}

TEST_CASE("a job started with signals blocked still stops on SIGTERM, and its launcher hears its ranks exit") {
  // A blocked signal stays blocked across exec, as when a job is started by a thread of a
  // Python program or from a signal handler: the launcher never ran its SIGTERM handler,
  // and, with SIGCHLD blocked, never heard a rank exit (it waited for them forever).
  const std::string log = engine::testing::tmp_path("blocked.log");
  std::vector<pid_t> ranks;
  const pid_t launcher = start_job(log, "PROBE_WAIT_STOP=1", "waiting to be stopped", &ranks, 0,
                                   {SIGTERM, SIGCHLD, SIGINT, SIGUSR1, SIGCONT, SIGWINCH});
  REQUIRE(launcher > 0);
  REQUIRE(ranks.size() == 2);
  // Each rank starts with nothing blocked (SIGWINCH: one neither the launcher nor a rank catches).
  for (pid_t r : ranks) {
    std::ifstream status("/proc/" + std::to_string(r) + "/status");
    std::string line;
    while (std::getline(status, line) && line.rfind("SigBlk:", 0) != 0) {}
    CHECK(line == "SigBlk:\t0000000000000000");
  }
  kill(launcher, SIGTERM);
  const int status = launcher_status(launcher, std::chrono::seconds(20));  // -1: it never ended
  const std::string text = engine::testing::read_bytes(log);
  INFO(text);
  CHECK(left_running(ranks, std::chrono::seconds(5)) == 0);
  CHECK(status == 128 + SIGTERM);
  CHECK_THAT(text, Catch::Contains("[rank 0] stopped at call") && Catch::Contains("(SIGTERM)") &&
                       Catch::Contains("every rank stopped on request (status 143)"));
}

namespace {
// The pids of the processes named `name` whose parent is one of `parents`.
std::vector<pid_t> children_named(const std::vector<pid_t>& parents, const std::string& name) {
  std::vector<pid_t> found;
  for (pid_t p : parents)
    for (pid_t c : children_of(p)) {
      std::ifstream comm("/proc/" + std::to_string(c) + "/comm");
      std::string n;
      std::getline(comm, n);
      if (n == name) found.push_back(c);
    }
  return found;
}
}  // namespace

TEST_CASE("a rank that is a shell script, stopped, takes the program it started with it") {
  // The launcher signals the rank's own process, the shell; it used to leave the shell's
  // child (here `sleep`, in real use the training program) running after the job ended.
  const std::string log = engine::testing::tmp_path("script_rank.log");
  const pid_t launcher = fork();
  if (launcher == 0) {
    setpgid(0, 0);
    if (!freopen(log.c_str(), "w", stdout) || !freopen(log.c_str(), "a", stderr)) _exit(126);
    execl(kLaunch.c_str(), kLaunch.c_str(), "--nproc_per_node=2", "/bin/sh", "-c", "echo ready; sleep 60; true",
          nullptr);
    _exit(127);
  }
  std::vector<pid_t> sleeps;
  for (int i = 0; i < 200 && sleeps.size() < 2; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    sleeps = children_named(children_of(launcher), "sleep");
  }
  REQUIRE(sleeps.size() == 2);
  kill(launcher, SIGTERM);
  const int status = launcher_status(launcher, std::chrono::seconds(20));
  const std::string text = engine::testing::read_bytes(log);
  INFO(text);
  CHECK(status == 128 + SIGTERM);
  CHECK(left_running(sleeps, std::chrono::seconds(2)) == 0);
  CHECK_THAT(text, Catch::Contains("launch: the ranks ended, leaving 2 processes they started running (pid ") &&
                       Catch::Contains(": sleep") && Catch::Contains("they were sent SIGTERM, as the job has ended"));
}

TEST_CASE("a rank that exits leaving a process that holds its output: the launcher ends it, and ends") {
  // The launcher waits for the ranks' pipes to close, to pass on every line; a process left
  // in the background holding one used to keep it waiting as long as that process lived.
  const Run r = run(kLaunch + " --nproc_per_node=1 /bin/sh -c 'sleep 60 & echo started'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK(r.seconds < 10);
  CHECK_THAT(r.output, Catch::Contains("[rank 0] started") &&
                           Catch::Contains("leaving 1 process they started running (pid ") &&
                           Catch::Contains("it was sent SIGTERM, as the job has ended"));
}

TEST_CASE("children the launcher had before it started a rank are not taken for what a rank left") {
  // `sh -c 'helper & exec launch ...'` hands the shell's child to the launcher.
  const Run r = run("/bin/sh -c 'sleep 30 >/dev/null 2>&1 & echo helper $!; exec " + kLaunch +
                    " --nproc_per_node=1 /bin/echo hi'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 0] hi") && !Catch::Contains("leaving"));
  const size_t at = r.output.find("helper ");
  REQUIRE(at != std::string::npos);
  const pid_t helper = pid_t(std::atoi(r.output.c_str() + at + 7));
  CHECK(running(helper));  // the launcher left it alone
  if (helper > 0) kill(helper, SIGKILL);
}
