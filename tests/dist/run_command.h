// Runs a shell command for the launcher's tests and keeps its exit status, its output
// (stdout and stderr together) and how long it took.
//   const Run r = run(runfile("dist/launch") + " --nproc_per_node=2 /bin/true");
//   REQUIRE(r.status == 0);
#pragma once

#include <sys/wait.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace engine::testing {

// A file of the test's runfiles, by its path in the workspace.
inline std::string runfile(const std::string& path) {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root ? root : ".") + "/ddp_engine/" + path;
}

// The launcher, and the probe program its tests start under it (both in their data).
inline const std::string kLaunch = runfile("dist/launch");
inline const std::string kProbe = runfile("tests/dist/launch_probe");

struct Run {
  int status;          // the exit status; -1 when killed by a signal or not started
  std::string output;  // stdout and stderr, interleaved as written
  double seconds;
};

inline Run run(const std::string& cmd) {
  const auto t0 = std::chrono::steady_clock::now();
  FILE* p = popen((cmd + " 2>&1").c_str(), "r");
  // No REQUIRE here: run() is also called from threads, and Catch2's assertions are not
  // thread-safe. A failed popen is a status the caller's REQUIRE names.
  if (p == nullptr) return {-1, "popen failed: " + std::string(std::strerror(errno)), 0};
  std::string out;
  char buf[4096];
  while (size_t n = fread(buf, 1, sizeof buf, p)) out.append(buf, n);
  const int st = pclose(p);
  return {WIFEXITED(st) ? WEXITSTATUS(st) : -1, out,
          std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count()};
}

// The folder the launcher's --log_dir run wrote its logs in, as it said ("launch: the ranks'
// logs go to D/none_AbC123/attempt_N/LOCAL_RANK/"): "D/none_AbC123", "" when it did not say.
inline std::string launcher_log_dir(const std::string& output) {
  const std::string said = "launch: the ranks' logs go to ", tail = "/attempt_N/LOCAL_RANK/\n";
  const size_t at = output.find(said), end = output.find(tail, at);
  return at == std::string::npos || end == std::string::npos ? ""
                                                             : output.substr(at + said.size(), end - at - said.size());
}

}  // namespace engine::testing
