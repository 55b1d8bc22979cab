// Benchmarks' helper: run `world` ranks as forked processes on one free port.
//
//   return fork_ranks(world, [&](int rank, int port) { run_rank(rank, world, port); });
//
// Each child runs fn and exits 0, or prints its error and exits 1. Returns 0 when every
// rank succeeded, else 1. The port is held (testing::HeldPort) until the ranks end, so no
// other program's bind(port 0) is given it between its choice and rank 0's store; and when
// one rank fails, the others are stopped at once rather than left to wait for it until
// their collective timeout.
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "tests/testing/held_port.h"

inline int fork_ranks(int world, const std::function<void(int rank, int port)>& fn) {
  const engine::testing::HeldPort port;
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        fn(r, port.number());
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    if (pid < 0) std::perror("fork");
    if (pid > 0) pids.push_back(pid);
  }
  int failed = int(pids.size()) < world;
  for (size_t left = pids.size(); left > 0; --left) {
    int st = 0;
    const pid_t p = waitpid(-1, &st, 0);
    if (p < 0) break;
    pids.erase(std::remove(pids.begin(), pids.end(), p), pids.end());
    if (WIFEXITED(st) && WEXITSTATUS(st) == 0) continue;
    ++failed;
    for (pid_t other : pids) kill(other, SIGTERM);
  }
  return failed ? 1 : 0;
}
