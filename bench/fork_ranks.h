// Benchmarks' helper: run `world` ranks as forked processes on one free port.
//
//   return fork_ranks(world, [&](int rank, int port) { run_rank(rank, world, port); });
//
// Each child runs fn and exits 0, or prints its error and exits 1. Returns 0 when every
// rank succeeded, else 1.
#pragma once

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <exception>
#include <functional>
#include <vector>

#include "dist/socket.h"

inline int fork_ranks(int world, const std::function<void(int rank, int port)>& fn) {
  const int port = engine::dist::Listener::bind("127.0.0.1", 0).port();
  std::vector<pid_t> pids;
  for (int r = 0; r < world; ++r) {
    const pid_t pid = fork();
    if (pid == 0) {
      try {
        fn(r, port);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "rank %d: %s\n", r, e.what());
        _exit(1);
      }
      _exit(0);
    }
    pids.push_back(pid);
  }
  int failed = 0;
  for (pid_t p : pids) {
    int st = 0;
    waitpid(p, &st, 0);
    failed += !(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  }
  return failed ? 1 : 0;
}
