// Jobs stopped and jobs asked to stop. The clock deadlines are measured with takes off the
// time a process spends stopped and then continued (SIGSTOP, Ctrl-Z and `fg`), while a long
// gap with no stop counts in full: a whole job stopped for longer than its timeout carries
// on. And stop_requested(): a SIGTERM to any rank stops every rank after the same call.
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <chrono>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "catch2/catch.hpp"
#include "dist/stop_clock.h"
#include "dist/watchdog.h"
#include "tests/dist/run_command.h"

using namespace engine::dist;
using namespace engine::testing;  // run, Run, kLaunch, kProbe
using std::chrono::duration;

namespace {

// Process `pid`'s state letter from /proc (T: stopped), or '?'.
char state_of(pid_t pid) {
  std::ifstream f("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  std::getline(f, line);
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
}

// Stops this process (SIGSTOP) for `ms`: a helper process continues it. Returns the seconds
// the steady clock moved meanwhile.
double stop_self_for(int ms) {
  const pid_t self = getpid();
  const pid_t helper = fork();
  if (helper < 0) return 0;
  if (helper == 0) {  // waits (at most 10 s) for the test to be stopped, then continues it `ms` later
    for (int i = 0; i < 1000 && state_of(self) != 'T'; ++i) usleep(10000);
    usleep(useconds_t(ms) * 1000);
    kill(self, SIGCONT);
    _exit(0);
  }
  const auto t0 = std::chrono::steady_clock::now();
  raise(SIGSTOP);
  const double seconds = duration<double>(std::chrono::steady_clock::now() - t0).count();
  int status = 0;
  waitpid(helper, &status, 0);
  return seconds;
}

}  // namespace

TEST_CASE("a gap between readings with no stop counts in full") {
  watch_for_stops();
  const auto stopped = time_stopped();
  const auto t0 = Clock::now();
  std::this_thread::sleep_for(std::chrono::milliseconds(1300));  // no reading meanwhile: a gap
  const auto t1 = Clock::now();
  CHECK(duration<double>(t1 - t0).count() >= 1.3);
  CHECK(time_stopped() == stopped);
}

TEST_CASE("the time this process was stopped and continued is taken off the clock") {
  watch_for_stops();
  const auto t0 = Clock::now();
  const double steady = stop_self_for(1500);
  const auto t1 = Clock::now();
  REQUIRE(steady >= 1.5);  // it was stopped
  CHECK(duration<double>(t1 - t0).count() < 0.5);
  CHECK(duration<double>(time_stopped()).count() >= 1.5);
}

TEST_CASE("the nccl watchdog does not take a collective for overdue after the job was stopped and continued") {
  watch_for_stops();
  std::atomic<bool> done{false};
  Watchdog dog(
      0, std::chrono::milliseconds(1000), [](const std::string&) {}, [] { return std::string(); },
      std::chrono::milliseconds(10));
  dog.watch("all_reduce(SUM, 1 x float32) #0", [&] { return done.load(); });
  REQUIRE(stop_self_for(1500) >= 1.5);                          // longer than the watchdog's timeout
  std::this_thread::sleep_for(std::chrono::milliseconds(100));  // some of its polls after the stop
  done = true;
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  CHECK(dog.error() == "");
  CHECK(dog.in_flight() == 0);
}

TEST_CASE("a job stopped as a whole for longer than its timeout carries on when continued") {
  // Rank 1 holds the others in the all-reduce for 1.5 s; 0.3 s into that the launcher and its
  // ranks are stopped for 4 s (their process group, as Ctrl-Z does), with a 3 s timeout.
  for (const char* shm : {"1", "0"}) {  // one machine's shared memory, and the TCP path between machines
    INFO("ENGINE_SHM=" << shm);
    // A file of this run's own: in a sandbox with its own pid namespace every run's pid is
    // the same, and /tmp may be shared.
    const char* tmp = std::getenv("TEST_TMPDIR");
    const std::string out = std::string(tmp ? tmp : "/tmp") + "/stop_test." + std::to_string(getpid()) + ".out";
    const Run r =
        run(std::string("ENGINE_SHM=") + shm + " ENGINE_DIST_TIMEOUT=3 PROBE_HOLD_RANK=1 PROBE_HOLD_MS=1500 setsid " +
            kLaunch + " --nproc_per_node=2 " + kProbe + " > " + out + " 2>&1 & job=$!; " +
            "for i in $(seq 200); do grep -q holding " + out + " && break; sleep 0.05; done; " +
            "sleep 0.3; kill -STOP -$job; sleep 4; kill -CONT -$job; wait $job; s=$?; cat " + out + "; rm -f " + out +
            "; exit $s");
    INFO(r.output);
    CHECK(r.status == 0);
    CHECK_THAT(r.output, Catch::Contains("holding"));
    CHECK_THAT(r.output, Catch::Contains("[rank 0] sum 1") && Catch::Contains("[rank 1] sum 1"));
    CHECK_THAT(r.output, !Catch::Contains("timed out") && !Catch::Contains("stopped for"));
    CHECK(r.seconds >= 4);  // the stop happened while the job ran
  }
}

TEST_CASE("a rank stopped alone still times the others out, and they say it is stopped") {
  // Without a launcher to end the job (--stopped_timeout=0, as under srun or by hand), the
  // others wait out their timeout: their clocks run on while rank 1 alone is stopped.
  for (const char* shm : {"1", "0"}) {  // shared memory, and the TCP path (ENGINE_ALLREDUCE=ring takes it too)
    INFO("ENGINE_SHM=" << shm);
    const Run r = run(std::string("ENGINE_SHM=") + shm + " ENGINE_DIST_TIMEOUT=2 PROBE_STOP_RANK=1 " + kLaunch +
                      " --stopped_timeout=0 --nproc_per_node=2 " + kProbe);
    INFO(r.output);
    CHECK(r.status != 0);
    CHECK_THAT(r.output, Catch::Contains("[rank 0] launch_probe: [dist] timed out after 2 s in all_reduce") &&
                             Catch::Contains("waiting for rank 1, which is stopped (pid ") &&
                             Catch::Contains(": SIGSTOP, or Ctrl-Z; kill -CONT "));
    CHECK(r.seconds < 30);
  }
}

TEST_CASE(
    "stop_requested: a SIGTERM to one rank stops every rank after the same call; a second SIGTERM changes nothing, a "
    "second Ctrl-C ends it") {
  const Run r = run("PROBE_TERM_RANK=1 " + kLaunch + " --nproc_per_node=3 " + kProbe);
  INFO(r.output);
  CHECK(r.status == 143);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] stopped at call 5 (SIGTERM)") &&
                           Catch::Contains("[rank 0] stopped at call 5 (a signal to another rank)") &&
                           Catch::Contains("[rank 2] stopped at call 5 (a signal to another rank)") &&
                           Catch::Contains("exited with status 143 (128 + SIGTERM: it stopped on request)"));
  const Run twice = run("PROBE_TERM_RANK=1 PROBE_TERM_TWICE=1 " + kLaunch + " --nproc_per_node=2 " + kProbe);
  INFO(twice.output);
  CHECK_THAT(twice.output, Catch::Contains("[rank 1] stopped at call 5 (SIGTERM)") && Catch::Contains("rank 1 (pid ") &&
                               Catch::Contains("was killed by signal 2 (Interrupt)"));
}
