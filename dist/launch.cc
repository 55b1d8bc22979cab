// The launcher: torchrun for this engine. Starts one process per device with the
// environment init_process_group("...", env://) reads, labels every line they print with
// their rank, and when any of them fails, stops the rest and says which one and why.
//
//   bazel run //dist:launch -- --nproc_per_node=2 bazel-bin/lessons/.../train --epochs 3
//
// Flags (torchrun's names): --nproc_per_node N, --nnodes N, --node_rank R, --master_addr A,
// --master_port P (0 or omitted: a free port, single node only), --standalone,
// --job_token T (the secret every connection must present; generated when omitted on a
// single node), --max_restarts N (start the whole group again after a failure, N times
// at most), --run_id ID, --log_dir D with --redirects M / --tee M (M: 1 stdout, 2 stderr,
// 3 both, into D/attempt_N/LOCAL_RANK/stdout.log and stderr.log; --redirects: only there,
// --tee: there and on the console). Each process gets RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
// OMP_NUM_THREADS=1 (unless set), ENGINE_JOB_TOKEN and ENGINE_LAUNCH_ID.
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "dist/launch_args.h"
#include "dist/shm_allreduce.h"
#include "dist/socket.h"
#include "tensor/check.h"

namespace {

using engine::Error;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr,
               "launch: %s\n"
               "usage: launch [--nproc_per_node=N] [--nnodes=N --node_rank=R] [--master_addr=A] [--master_port=P]\n"
               "              [--standalone] [--job_token=T] [--max_restarts=N] [--run_id=ID] [--stopped_timeout=S]\n"
               "              [--log_dir=D [--redirects=M] [--tee=M]] PROGRAM [ARGS...]\n",
               why.c_str());
  std::exit(2);
}

std::string random_token() {
  unsigned char b[16] = {};
  FILE* f = std::fopen("/dev/urandom", "rb");
  if (f) {
    if (std::fread(b, 1, sizeof b, f) != sizeof b) std::memset(b, 0, sizeof b);
    std::fclose(f);
  }
  char hex[33];
  for (int i = 0; i < 16; ++i) std::snprintf(hex + 2 * i, 3, "%02x", b[i]);
  return hex;
}

// Under `bazel run` the working directory is the runfiles tree: a relative program path
// is looked up there first, then in the directory bazel run was called from.
std::string resolve_program(const std::string& p) {
  if (p.find('/') == std::string::npos || p[0] == '/' || access(p.c_str(), X_OK) == 0) return p;
  if (const char* wd = std::getenv("BUILD_WORKING_DIRECTORY")) {
    const std::string q = std::string(wd) + "/" + p;
    if (access(q.c_str(), X_OK) == 0) return q;
  }
  return p;
}

// True when the process is stopped by a signal (SIGSTOP, SIGTSTP: state T): it is alive
// but will never answer, and the others will time out waiting for it. A tracing stop
// (state t) is not counted: tools stop a process that way for a moment (LeakSanitizer
// does, at every exit under ASan), and a rank under a debugger is being looked at.
bool is_stopped(pid_t pid) {
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t close = line.rfind(')');
  return close != std::string::npos && close + 2 < line.size() && line[close + 2] == 'T';
}

// Removes the shared-memory names this job left in /dev/shm. The ranks remove each name
// once all have mapped it, on every path they control; only a rank killed in the middle
// of a setup leaves one, and the names start with the job's tag (shm_job_tag).
void remove_job_segments(const std::string& token) {
  const std::string prefix = "engine-" + engine::dist::shm_job_tag(token) + "-";
  std::error_code ec;
  for (std::filesystem::directory_iterator it("/dev/shm", ec), end; !ec && it != end; it.increment(ec))
    if (it->path().filename().string().rfind(prefix, 0) == 0)
      shm_unlink(("/" + it->path().filename().string()).c_str());
}

struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  int out = -1, err = -1;        // read ends of its stdout and stderr pipes
  std::string out_buf, err_buf;  // a partial last line waiting for its newline
  FILE* out_log = nullptr;       // --log_dir: where this rank's streams are also (or only) written
  FILE* err_log = nullptr;
  bool out_console = true, err_console = true;
  bool running = true;
  int status = 0;
  std::chrono::steady_clock::time_point stopped_since{};  // when it was first seen stopped
};

volatile sig_atomic_t g_signal = 0;
void on_signal(int sig) { g_signal = sig; }

// Children are reaped in the SIGCHLD handler, the moment they exit, and reported through a
// pipe in that order. When one rank dies its peers fail a moment later (their connections
// to it close); reaping in order of death is what lets the launcher name the first one.
int g_reaped[2] = {-1, -1};
void on_child(int) {
  const int saved = errno;
  int status = 0;
  pid_t pid;
  while ((pid = waitpid(-1, &status, WNOHANG)) > 0) {
    const int rec[2] = {int(pid), status};
    (void)!write(g_reaped[1], rec, sizeof rec);
  }
  errno = saved;
}

// Writes each complete line of `buf` to the console (prefixed with the rank) and/or to
// the rank's log file (as the rank wrote it).
void flush_lines(std::string& buf, FILE* console, FILE* log, int rank, bool all) {
  size_t start = 0, nl;
  auto emit = [&](const char* line, size_t n) {
    if (console) std::fprintf(console, "[rank %d] %.*s\n", rank, int(n), line);
    if (log) std::fprintf(log, "%.*s\n", int(n), line);
  };
  while ((nl = buf.find('\n', start)) != std::string::npos) {
    emit(buf.data() + start, nl - start);
    start = nl + 1;
  }
  buf.erase(0, start);
  if (all && !buf.empty()) {
    emit(buf.data(), buf.size());
    buf.clear();
  }
  if (console) std::fflush(console);
  if (log) std::fflush(log);
}

bool drain(int& fd, std::string& buf, FILE* console, FILE* log, int rank) {
  if (fd < 0) return false;
  char tmp[4096];
  const ssize_t n = read(fd, tmp, sizeof tmp);
  if (n > 0) {
    buf.append(tmp, size_t(n));
    flush_lines(buf, console, log, rank, false);
    return true;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    flush_lines(buf, console, log, rank, true);
    close(fd);
    fd = -1;
  }
  return false;
}

std::string describe_status(int status) {
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

// ---- One attempt: start the node's ranks, watch them, stop them all at the first failure.

struct Job {
  engine::dist::LaunchArgs args;
  std::string program, launch_id;
  int world = 0;
};

struct Outcome {
  int exit_code = 0;       // 0: every rank succeeded
  std::string reason;      // the first failure, in words
  bool signalled = false;  // the launcher itself was told to stop: no restart
};

FILE* open_log(const std::string& dir, const char* name) {
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  FILE* f = std::fopen((dir + "/" + name).c_str(), "w");
  if (!f) usage("cannot write the log file " + dir + "/" + name + ": " + std::strerror(errno));
  return f;
}

// The environment torchrun gives each worker, plus the engine's job token and launch id.
void set_worker_env(const Job& job, const Child& c, int attempt) {
  const auto& o = job.args;
  auto set = [](const char* k, const std::string& v) { setenv(k, v.c_str(), 1); };
  set("RANK", std::to_string(c.rank));
  set("LOCAL_RANK", std::to_string(c.local_rank));
  set("WORLD_SIZE", std::to_string(job.world));
  set("LOCAL_WORLD_SIZE", std::to_string(o.nproc_per_node));
  set("GROUP_RANK", std::to_string(o.node_rank));
  set("GROUP_WORLD_SIZE", std::to_string(o.nnodes));
  set("ROLE_RANK", std::to_string(c.rank));
  set("ROLE_WORLD_SIZE", std::to_string(job.world));
  set("MASTER_ADDR", o.master_addr);
  set("MASTER_PORT", std::to_string(o.master_port));
  set("TORCHELASTIC_RESTART_COUNT", std::to_string(attempt));
  set("TORCHELASTIC_MAX_RESTARTS", std::to_string(o.max_restarts));
  set("TORCHELASTIC_RUN_ID", o.run_id);
  set("ENGINE_JOB_TOKEN", o.token);
  set("ENGINE_LAUNCH_ID", job.launch_id);  // this launcher's: ranks on one node compare it at rendezvous
  setenv("OMP_NUM_THREADS", "1", 0);       // as torchrun: one thread per process unless told otherwise
}

std::vector<Child> spawn(const Job& job, int attempt) {
  const auto& o = job.args;
  std::vector<Child> children(size_t(o.nproc_per_node));
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Child& c = children[size_t(local)];
    c.rank = o.node_rank * o.nproc_per_node + local;
    c.local_rank = local;
    if (!o.log_dir.empty() && (o.redirects | o.tee)) {
      const std::string dir = o.log_dir + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local);
      const int logged = o.redirects | o.tee;
      if (logged & 1) c.out_log = open_log(dir, "stdout.log");
      if (logged & 2) c.err_log = open_log(dir, "stderr.log");
      c.out_console = !(o.redirects & 1);
      c.err_console = !(o.redirects & 2);
    }
    int out[2], err[2];
    if (pipe(out) != 0 || pipe(err) != 0) usage(std::string("pipe failed: ") + std::strerror(errno));
    c.pid = fork();
    if (c.pid == 0) {
      dup2(out[1], 1), dup2(err[1], 2);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      set_worker_env(job, c, attempt);
      std::vector<char*> args;
      for (auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
      args[0] = const_cast<char*>(job.program.c_str());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      std::fprintf(stderr, "launch: cannot run %s: %s\n", job.program.c_str(), std::strerror(errno));
      _exit(127);
    }
    close(out[1]), close(err[1]);
    c.out = out[0], c.err = err[0];
    fcntl(c.out, F_SETFL, O_NONBLOCK), fcntl(c.err, F_SETFL, O_NONBLOCK);
  }
  return children;
}

std::string describe_failure(const Child& c, const std::vector<Child>& children) {
  std::string reason =
      "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " + describe_status(c.status);
  // A rank that times out is often not the culprit: the one it waited for is.
  for (auto& other : children)
    if (other.running && is_stopped(other.pid))
      reason = "rank " + std::to_string(other.rank) + " (pid " + std::to_string(other.pid) +
               ") is stopped (SIGSTOP or SIGTSTP), and " + reason + " waiting for it";
  return reason;
}

void stop_all(std::vector<Child>& children) {
  for (auto& c : children)
    if (c.running) kill(c.pid, SIGTERM), kill(c.pid, SIGCONT);  // a stopped rank, too
}

// The ranks that failed, in the order they were reaped, and when the first was.
struct Failures {
  std::vector<Child*> seen;
  std::chrono::steady_clock::time_point since{};
};

// How long the launcher waits, after a rank exits with an error, for a rank killed by a
// signal to be reaped. A killed process's sockets are closed before it can be reaped, so
// on a loaded machine the peer that read the closed connection and exited can be reaped
// first; it is the consequence, the killed one the cause.
constexpr auto kCauseGrace = std::chrono::milliseconds(1000);

// Reaps what exited since the last call.
void reap(std::vector<Child>& children, Failures& failures) {
  int rec[2];
  while (read(g_reaped[0], rec, sizeof rec) == sizeof rec) {
    for (auto& c : children) {
      if (c.pid != rec[0] || !c.running) continue;
      c.status = rec[1];
      c.running = false;
      if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) continue;
      if (failures.seen.empty()) failures.since = std::chrono::steady_clock::now();
      failures.seen.push_back(&c);
    }
  }
}

// Names the attempt's first failure: a rank killed by a signal over ranks that exited with
// an error (most likely because their peer had gone), else the first reaped. Waits up to
// kCauseGrace for the killed one unless `now` (no rank is left to wait for) or a rank is
// stopped (then that one is named, by describe_failure).
void decide(std::vector<Child>& children, const Failures& failures, bool now, Outcome& out, bool& stopping) {
  if (stopping || failures.seen.empty()) return;
  const auto killed =
      std::find_if(failures.seen.begin(), failures.seen.end(), [](const Child* c) { return WIFSIGNALED(c->status); });
  const bool peer_stopped =
      std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running && is_stopped(c.pid); });
  if (killed == failures.seen.end() && !now && !peer_stopped &&
      std::chrono::steady_clock::now() - failures.since < kCauseGrace)
    return;
  const Child& first = killed != failures.seen.end() ? **killed : *failures.seen.front();
  out.exit_code = WIFEXITED(first.status) ? WEXITSTATUS(first.status) : 128 + WTERMSIG(first.status);
  out.reason = describe_failure(first, children);
  stopping = true;
}

// A rank stopped (SIGSTOP, SIGTSTP) is alive but will never answer: the others would
// wait for it until their collective timeout. One stopped longer than `limit` seconds ends
// the attempt at once, named.
void check_stopped(std::vector<Child>& children, int limit, Outcome& out, bool& stopping) {
  if (limit <= 0) return;
  const auto now = std::chrono::steady_clock::now();
  for (auto& c : children) {
    if (!c.running || !is_stopped(c.pid)) {
      c.stopped_since = {};
      continue;
    }
    if (c.stopped_since == std::chrono::steady_clock::time_point{}) c.stopped_since = now;
    if (now - c.stopped_since < std::chrono::seconds(limit)) continue;
    out.exit_code = 128 + SIGSTOP;
    out.reason = "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") has been stopped for " +
                 std::to_string(limit) +
                 " s (SIGSTOP or SIGTSTP): the others would wait for it until "
                 "their timeout";
    stopping = true;
    return;
  }
}

Outcome watch(std::vector<Child>& children, int stopped_timeout) {
  Outcome out;
  auto stopping_since = std::chrono::steady_clock::time_point{};
  bool stopping = false;
  Failures failures;
  while (true) {
    std::vector<pollfd> fds{{g_reaped[0], POLLIN, 0}};
    for (auto& c : children) {
      if (c.out >= 0) fds.push_back({c.out, POLLIN, 0});
      if (c.err >= 0) fds.push_back({c.err, POLLIN, 0});
    }
    poll(fds.data(), nfds_t(fds.size()), 50);
    for (auto& c : children) {
      while (drain(c.out, c.out_buf, c.out_console ? stdout : nullptr, c.out_log, c.rank)) {}
      while (drain(c.err, c.err_buf, c.err_console ? stderr : nullptr, c.err_log, c.rank)) {}
    }
    const bool was_stopping = stopping;
    reap(children, failures);
    bool any_running = false;
    for (auto& c : children) any_running = any_running || c.running;
    decide(children, failures, !any_running, out, stopping);
    if (!stopping) check_stopped(children, stopped_timeout, out, stopping);
    if (g_signal && !stopping) {
      out.reason = std::string("the launcher got signal ") + strsignal(g_signal);
      out.exit_code = 128 + g_signal;
      out.signalled = stopping = true;
    }
    if (stopping && !was_stopping) stopping_since = std::chrono::steady_clock::now(), stop_all(children);
    // Ranks that ignore SIGTERM for 5 s are killed.
    if (stopping && std::chrono::steady_clock::now() - stopping_since > std::chrono::seconds(5))
      for (auto& c : children)
        if (c.running) kill(c.pid, SIGKILL);
    bool pipes_open = false;
    any_running = false;
    for (auto& c : children)
      any_running = any_running || c.running, pipes_open = pipes_open || c.out >= 0 || c.err >= 0;
    if (!any_running && (!pipes_open || stopping)) break;  // a failed rank's children may still hold the pipes
  }
  for (auto& c : children) {
    if (c.out >= 0) close(c.out);
    if (c.err >= 0) close(c.err);
    if (c.out_log) std::fclose(c.out_log);
    if (c.err_log) std::fclose(c.err_log);
  }
  return out;
}

Job prepare(int argc, char** argv) {
  Job job;
  try {
    job.args = engine::dist::parse_launch_args(std::vector<std::string>(argv + 1, argv + argc),
                                               std::getenv("ENGINE_JOB_TOKEN"));
  } catch (const Error& e) {
    usage(e.what());
  }
  auto& o = job.args;
  if (o.master_port == 0) {
    try {  // a free port on the rendezvous address; rank 0 will listen on it (in every attempt)
      o.master_port = engine::dist::Listener::bind(o.master_addr, 0).port();
    } catch (const Error& e) {
      usage(std::string("cannot find a free port on ") + o.master_addr + ": " + e.what());
    }
  }
  if (o.token.empty()) o.token = random_token();
  job.launch_id = random_token().substr(0, 16);
  job.program = resolve_program(o.command[0]);
  job.world = o.nproc_per_node * o.nnodes;
  return job;
}

void install_handlers() {
  signal(SIGINT, on_signal);
  signal(SIGTERM, on_signal);
  signal(SIGPIPE, SIG_IGN);
  if (pipe(g_reaped) != 0) usage(std::string("pipe failed: ") + std::strerror(errno));
  fcntl(g_reaped[0], F_SETFL, O_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
}

}  // namespace

// Runs the group; after a failure, stops it and (--max_restarts) starts it again whole,
// with TORCHELASTIC_RESTART_COUNT one higher, as torchrun does. Resuming is the program's
// part: it finds its checkpoint and continues from it.
int main(int argc, char** argv) {
  const Job job = prepare(argc, argv);
  install_handlers();
  std::string first_failure;
  for (int attempt = 0;; ++attempt) {
    std::vector<Child> children = spawn(job, attempt);
    const Outcome out = watch(children, job.args.stopped_timeout);
    remove_job_segments(job.args.token);
    if (out.reason.empty()) return 0;
    if (first_failure.empty()) first_failure = out.reason;
    if (out.signalled || attempt >= job.args.max_restarts) {
      if (attempt == 0 || out.signalled) {
        std::fprintf(stderr, "launch: %s; the other ranks were stopped\n", out.reason.c_str());
      } else {
        std::fprintf(stderr, "launch: %s; giving up after %d restart%s (the first failure: %s)\n", out.reason.c_str(),
                     attempt, attempt == 1 ? "" : "s", first_failure.c_str());
      }
      return out.exit_code ? out.exit_code : 1;
    }
    std::fprintf(stderr, "launch: %s; the other ranks were stopped; restarting the group (restart %d of %d)\n",
                 out.reason.c_str(), attempt + 1, job.args.max_restarts);
  }
}
