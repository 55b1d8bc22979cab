// A tiny distributed program for the launcher's tests: reports what its rank sees, sums
// the ranks with all_reduce (and says which algorithm ran), and fails or hangs on request.
//   PROBE_FAIL_RANK=r : rank r exits with status 3 before the all-reduce
//   PROBE_PRINT_PARTIAL=1 : also print a line without a trailing newline at the end
//   PROBE_FAIL_ATTEMPTS=n : with PROBE_FAIL_RANK, fail only in the first n attempts (restarts)
//   PROBE_LINGER_MS=t : with PROBE_FAIL_RANK, the failing rank leaves the group 200 ms after
//                       its error (its peers lose it and fail) and exits only t ms later:
//                       reaped after them
//   PROBE_KILL_RANK=r : rank r kill -9s itself after the rendezvous
//   PROBE_KILL_AFTER_MS=t : with PROBE_KILL_RANK, it waits t ms first
//   PROBE_STOP_RANK=r : rank r stops itself (SIGSTOP) before the all-reduce
//   PROBE_LEAK_SHM=1 : rank 0 creates a shared-memory name of the job's, then kill -9s itself
//   PROBE_HOLD_MS=t : every rank waits t ms after the rendezvous (keeps a job's store up, so
//                     two jobs started together surely overlap on a busy machine)
//   PROBE_HOLD_RANK=r : with PROBE_HOLD_MS, only rank r waits (the others wait for it in the
//                       all-reduce); it prints "holding" first
//   PROBE_TERM_RANK=r : every rank asks stop_requested() up to 100 times and says at which call
//                       it stopped; rank r sends itself SIGTERM before the 5th call (and
//                       SIGTERM, then SIGINT twice, after stopping, with PROBE_TERM_TWICE=1)
//   PROBE_WAIT_STOP=1 : every rank catches the stop signals, prints "waiting to be stopped", and
//                       asks stop_requested() every 20 ms (for at most 60 s); then says at which
//                       call it stopped and why, and exits 143
//   PROBE_DEAF=1 : every rank catches the stop signals, prints "deaf", and holds 60 s without
//                  asking (a step that takes long)
//   PROBE_SHARED_FLOATS=n : also sums rank + 1 over a shared buffer of n floats (DDP keeps
//                           its buckets in these) and says whether every element is right
//   PROBE_COUNT_FILES=1 : says how many files the rank had open when it started
//   PROBE_SKIP_INIT_RANK=r : rank r (by RANK) exits with status 0 before init_process_group
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/shm_allreduce.h"

#include "dist/dist.h"
#include "dist/open_files.h"
#include "dist/stop_request.h"
#include "tensor/ops.h"

using namespace engine;

int main() try {
  if (std::getenv("PROBE_COUNT_FILES"))
    std::printf("open files at start: %lld\n", static_cast<long long>(dist::open_files())), std::fflush(stdout);
  if (const char* r = std::getenv("PROBE_SKIP_INIT_RANK");
      r && std::getenv("RANK") && std::strcmp(r, std::getenv("RANK")) == 0)
    return std::printf("leaving before init_process_group\n"), 0;
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  struct sigaction pipe {};
  sigaction(SIGPIPE, nullptr, &pipe);
  std::printf("rank %d of %d local %d/%d token %s sigpipe %s\n", rank, dist::get_world_size(), dist::get_local_rank(),
              dist::get_local_world_size(), std::getenv("ENGINE_JOB_TOKEN") ? "set" : "unset",
              pipe.sa_handler == SIG_DFL ? "default" : "changed");
  std::fflush(stdout);
  const char* restart = std::getenv("TORCHELASTIC_RESTART_COUNT");
  const int attempt = restart ? std::atoi(restart) : 0;
  std::printf("attempt %d\n", attempt);
  std::fflush(stdout);
  const char* fail = std::getenv("PROBE_FAIL_RANK");
  const char* fail_attempts = std::getenv("PROBE_FAIL_ATTEMPTS");
  const bool fail_now = !fail_attempts || attempt < std::atoi(fail_attempts);
  if (const char* k = std::getenv("PROBE_KILL_RANK"); k && std::atoi(k) == rank) {
    if (const char* after = std::getenv("PROBE_KILL_AFTER_MS"))
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(after)));
    raise(SIGKILL);
  }
  if (fail && std::atoi(fail) == rank && fail_now) {
    std::fprintf(stderr, "failing on purpose\n");
    if (const char* linger = std::getenv("PROBE_LINGER_MS")) {
      // Leaving the group makes its peers fail at once (their all_reduce meets its
      // barrier). The error goes out 200 ms before that: two ranks' errors that reach the
      // launcher within one pass of its reads cannot be told apart in time.
      std::this_thread::sleep_for(std::chrono::milliseconds(200));
      dist::destroy_process_group();
      std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(linger)));
    }
    return 3;
  }
  if (const char* a = std::getenv("PROBE_ALLOCATE_RANK"); a && std::atoi(a) == rank) {
    // Memory written to, 64 MiB at a time, up to 8 GiB: in a memory cgroup with a lower
    // limit the kernel's out-of-memory killer ends this rank with SIGKILL.
    std::vector<std::unique_ptr<char[]>> held;
    for (int mib = 0; mib < 8192; mib += 64) {
      held.emplace_back(new char[64 << 20]);
      std::memset(held.back().get(), 1, 64 << 20);
    }
    std::fprintf(stderr, "allocated 8 GiB and was not killed\n");
    return 4;
  }
  const char* stop = std::getenv("PROBE_STOP_RANK");
  if (stop && std::atoi(stop) == rank) raise(SIGSTOP);
  if (std::getenv("PROBE_LEAK_SHM") && rank == 0) {
    // What a rank killed in the middle of a shared-memory setup leaves behind.
    const std::string name = "/engine-" + dist::shm_job_tag(std::getenv("ENGINE_JOB_TOKEN")) + "-buf-" +
                             std::to_string(getpid()) + "-0-probe";
    const int fd = shm_open(name.c_str(), O_CREAT | O_RDWR, 0600);
    std::printf("left /dev/shm%s (fd %d)\n", name.c_str(), fd);
    std::fflush(stdout);
    raise(SIGKILL);
  }
  if (const char* t = std::getenv("PROBE_TERM_RANK")) {
    dist::catch_stop_signals();
    int call = 1;
    for (; call <= 100; ++call) {
      if (call == 5 && std::atoi(t) == rank) raise(SIGTERM);
      if (dist::stop_requested()) break;
    }
    std::printf("stopped at call %d (%s)\n", call,
                dist::stop_signal().empty() ? "a signal to another rank" : dist::stop_signal().c_str());
    std::fflush(stdout);
    // A repeated SIGTERM changes nothing; Ctrl-C pressed twice ends the process at once.
    if (std::getenv("PROBE_TERM_TWICE") && std::atoi(t) == rank) raise(SIGTERM), raise(SIGINT), raise(SIGINT);
    dist::destroy_process_group();
    return dist::kStoppedOnRequest;
  }
  if (std::getenv("PROBE_WAIT_STOP")) {
    dist::catch_stop_signals();
    std::printf("waiting to be stopped\n");
    std::fflush(stdout);
    int call = 1;
    for (; call <= 3000 && !dist::stop_requested(); ++call) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    std::printf("stopped at call %d (%s)\n", call,
                dist::stop_signal().empty() ? "a signal to another rank" : dist::stop_signal().c_str());
    std::fflush(stdout);
    dist::destroy_process_group();
    return dist::kStoppedOnRequest;
  }
  if (std::getenv("PROBE_DEAF")) {
    dist::catch_stop_signals();
    std::printf("deaf\n");
    std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    return 0;
  }
  const char* hold_rank = std::getenv("PROBE_HOLD_RANK");
  if (const char* hold = std::getenv("PROBE_HOLD_MS"); hold && (!hold_rank || std::atoi(hold_rank) == rank)) {
    if (hold_rank) std::printf("holding\n"), std::fflush(stdout);
    std::this_thread::sleep_for(std::chrono::milliseconds(std::atoi(hold)));
  }
  Tensor t = full({1}, double(rank));
  dist::all_reduce(t);
  std::printf("sum %d\n", int(t.item()));
  std::printf("all_reduce ran %s\n", dist::default_group().all_reduce_algorithm().c_str());
  if (const char* n = std::getenv("PROBE_SHARED_FLOATS")) {
    Tensor b = dist::default_group().shared_buffer(std::atoll(n));
    b.fill_(double(rank + 1));
    dist::all_reduce(b);
    const double want = dist::get_world_size() * (dist::get_world_size() + 1) / 2.0;
    const float* v = b.data<float>();
    bool right = true;
    for (int64_t i = 0; i < b.numel(); ++i) right = right && v[i] == want;
    std::printf("shared buffer sum %s\n", right ? "right" : "WRONG");
  }
  if (std::getenv("PROBE_PRINT_PARTIAL")) std::printf("no newline");
  if (const char* r = std::getenv("PROBE_NO_DESTROY_RANK"); r && std::atoi(r) == rank) return 0;  // as many scripts do
  if (const char* r = std::getenv("PROBE_LATE_DESTROY_RANK"); r && std::atoi(r) == rank)
    std::this_thread::sleep_for(std::chrono::seconds(3));
  std::fflush(stdout);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "launch_probe: %s\n", e.what());
  return 1;
}
