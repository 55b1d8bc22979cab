// Test helpers: run N ranks as threads of this process, or as forked processes.
//
//   run_threads(4, [](ProcessGroupTCP& g) { ... g.rank() ... });   // rethrows the first failure
//   auto results = run_processes(3, [](int rank) { ...; return 0; }, kill_plan);
#pragma once

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <exception>
#include <functional>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "dist/tcp_group.h"

namespace engine::testing {

using dist::ProcessGroupTCP;

// A store server on a free port, returned with the port.
inline std::shared_ptr<dist::TCPStore> serve_store(int* port, std::chrono::milliseconds timeout,
                                                   const std::string& token = "") {
  dist::StoreOptions so;
  so.timeout = timeout;
  so.token = token;
  auto s = std::make_shared<dist::TCPStore>("127.0.0.1", 0, true, so);
  *port = s->port();
  return s;
}

// Runs fn on `world` ranks as threads, each with its own process group whose options
// `configure` may change (e.g. host_id, to make ranks act as several machines). Rethrows
// the first error any rank raised.
inline void run_threads_with(int world, const std::function<void(int rank, dist::TCPGroupOptions&)>& configure,
                             const std::function<void(ProcessGroupTCP&)>& fn,
                             std::chrono::milliseconds timeout = std::chrono::seconds(20)) {
  int port = 0;
  auto server = serve_store(&port, timeout);
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        dist::StoreOptions so;
        so.timeout = timeout;
        auto store = r == 0 ? server : std::make_shared<dist::TCPStore>("127.0.0.1", port, false, so);
        dist::TCPGroupOptions go;
        go.timeout = timeout;
        if (configure) configure(r, go);
        ProcessGroupTCP g(store, r, world, go);
        fn(g);
      } catch (...) {
        errors[size_t(r)] = std::current_exception();
      }
    });
  }
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

// The same with the default options (shared_memory as given).
inline void run_threads(int world, const std::function<void(ProcessGroupTCP&)>& fn,
                        std::chrono::milliseconds timeout = std::chrono::seconds(20), bool shared_memory = true) {
  run_threads_with(
      world, [shared_memory](int, dist::TCPGroupOptions& o) { o.shared_memory = shared_memory; }, fn, timeout);
}

struct ChildResult {
  int exit_code = -1;  // -signal when killed
  std::string output;  // what the child wrote to its report pipe
  double seconds = 0;  // from start until it exited
  pid_t pid = 0;
};

// Forks `world` children running fn(rank) (its return value is the exit code; it can write
// to the fd it is given). If kill_rank >= 0, that child is sent SIGKILL after kill_after.
inline std::vector<ChildResult> run_processes(int world, const std::function<int(int rank, int report_fd)>& fn,
                                              int kill_rank = -1,
                                              std::chrono::milliseconds kill_after = std::chrono::milliseconds(0)) {
  std::vector<pid_t> pids;
  std::vector<int> fds;
  const auto start = std::chrono::steady_clock::now();
  for (int r = 0; r < world; ++r) {
    int p[2];
    if (pipe(p) != 0) throw std::runtime_error("pipe failed");
    const pid_t pid = fork();
    if (pid == 0) {
      close(p[0]);
      int code = 1;
      try {
        code = fn(r, p[1]);
      } catch (const std::exception& e) {
        const std::string m = std::string("ERROR: ") + e.what();
        (void)!write(p[1], m.data(), m.size());
      }
      _exit(code);
    }
    close(p[1]);
    pids.push_back(pid);
    fds.push_back(p[0]);
  }
  if (kill_rank >= 0) {
    std::this_thread::sleep_for(kill_after);
    kill(pids[size_t(kill_rank)], SIGKILL);
  }
  std::vector<ChildResult> out(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r) {
    int status = 0;
    waitpid(pids[size_t(r)], &status, 0);
    out[size_t(r)].seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    out[size_t(r)].exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : -WTERMSIG(status);
    out[size_t(r)].pid = pids[size_t(r)];
    char buf[4096];
    ssize_t n;
    while ((n = read(fds[size_t(r)], buf, sizeof buf)) > 0) out[size_t(r)].output.append(buf, size_t(n));
    close(fds[size_t(r)]);
  }
  return out;
}

}  // namespace engine::testing
