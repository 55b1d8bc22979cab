// The launcher: torchrun for this engine. Starts one process per device with the
// environment init_process_group("...", env://) reads, labels every line they print with
// their rank, and when any of them fails, stops the rest and says which one and why.
//
//   bazel run //dist:launch -- --nproc_per_node=2 bazel-bin/lessons/.../train --epochs 3
//
// Flags (torchrun's names): --nproc_per_node N, --nnodes N, --node_rank R, --master_addr A,
// --master_port P (0 or omitted: a free port, single node only), --rdzv_endpoint A:P (the
// same two), --rdzv_backend c10d|static (c10d without --node_rank: node ranks handed out at
// the endpoint, launch_rendezvous.h), --no_python (accepted), --standalone,
// --job_token T (the secret every connection must present; generated when omitted on a
// single node), --max_restarts N (start the whole group again after a failure, N times
// at most), --run_id ID, --log_dir D with --redirects M / --tee M (M: 1 stdout, 2 stderr,
// 3 both, into D/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/stdout.log and stderr.log, launch_logs.h;
// --redirects: only there, --tee: there and on the console). Each process gets RANK, LOCAL_RANK, WORLD_SIZE,
// LOCAL_WORLD_SIZE, GROUP_RANK, GROUP_WORLD_SIZE, ROLE_RANK, ROLE_WORLD_SIZE, MASTER_ADDR,
// MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_MAX_RESTARTS, TORCHELASTIC_RUN_ID,
// OMP_NUM_THREADS=1 (unless set), ENGINE_JOB_TOKEN, ENGINE_LAUNCH_ID and
// ENGINE_LAUNCH_NOTICE_FD (the pipe through which it says when it joins: launch_notice.h).
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <new>
#include <string>
#include <vector>

#include "dist/addresses.h"
#include "dist/launch_args.h"
#include "dist/launch_logs.h"
#include "dist/launch_program.h"
#include "dist/launch_rendezvous.h"
#include "dist/launch_unjoined.h"
#include "dist/launch_watch.h"
#include "dist/open_files.h"
#include "dist/shm_allreduce.h"
#include "dist/socket.h"
#include "tensor/check.h"
#include "tools/stop_signals/stop_signals.h"

namespace {

using engine::Error;
using engine::dist::launcher::Child;
using engine::dist::launcher::Outcome;

[[noreturn]] void usage(const std::string& why) {
  std::fprintf(stderr, "launch: %s\n%s(launch --help says what each flag does)\n", why.c_str(),
               engine::dist::kLaunchUsage);
  std::exit(2);
}

[[noreturn]] void help() {
  std::printf("%s", engine::dist::launch_help().c_str());
  std::exit(0);
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

engine::dist::launcher::LauncherSignals g_signals;
void on_signal(int sig) {
  if (g_signals.first == 0) g_signals.first = sig;
  if (sig == SIGINT) g_signals.interrupts = g_signals.interrupts + 1;
}

// ---- One attempt: start the node's ranks (launch_watch.h watches them, and stops them all
// at the first failure).
struct Job {
  engine::dist::LaunchArgs args;
  std::string program, launch_id;
  std::string log_run;  // --log_dir with --redirects or --tee: this launcher's folder in it (launch_logs.h)
  int world = 0;
  std::unique_ptr<engine::dist::TCPStore> node_store;  // under c10d: served by node 0, holds the node rank elsewhere
  int endpoint_port = 0;                               // under c10d: the endpoint's (args.master_port becomes rank 0's)
};

// --rdzv_backend=c10d without --node_rank: the launchers meet at the endpoint, which hands
// out node ranks and the port rank 0 will listen on (launch_rendezvous.h). They wait for
// each other up to ENGINE_DIST_TIMEOUT, as the ranks do.
std::unique_ptr<engine::dist::TCPStore> join_node_rendezvous(engine::dist::LaunchArgs& o, int prefer = -1) {
  std::chrono::milliseconds timeout{};
  try {
    timeout = engine::dist::timeout_from_env("the launcher's");
  } catch (const Error& e) {
    usage(e.what());
  }
  try {
    auto store = engine::dist::assign_node_rank(&o, timeout, prefer);
    std::fprintf(stderr, "launch: node rank %d of %d, handed out at the rendezvous (%s); rank 0 will listen at %s:%d\n",
                 o.node_rank, o.nnodes, o.node_rank == 0 ? "served here" : "served by the machine at the endpoint",
                 o.master_addr.c_str(), o.master_port);
    return store;
  } catch (const Error& e) {
    std::fprintf(stderr, "launch: %s\n", e.what());
    std::exit(1);
  }
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

// What a failed pipe or fork most likely ran into, for the message.
std::string limit_hint(int err) {
  struct rlimit l {};
  if (err == EMFILE && getrlimit(RLIMIT_NOFILE, &l) == 0)
    return " (this process may open " + std::to_string(l.rlim_cur) +
           " files, ulimit -n; the launcher keeps 3 per rank, and each rank needs more for its connections)";
  if (err == EAGAIN) return " (the limit on processes: ulimit -u, or the container's pids.max)";
  return "";
}

// A rank could not be started (no file descriptor or process left): the ranks already
// started are stopped (SIGTERM, then SIGKILL after 5 s) and the launcher says which rank
// failed to start and why. Never signals a pid that is not one of its children.
[[noreturn]] void abandon_start(std::vector<Child>& children, int rank, const std::string& what, int err,
                                const std::string& token) {
  for (auto& c : children)
    if (c.pid > 0) kill(c.pid, SIGTERM), kill(c.pid, SIGCONT);
  const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(5);
  auto any_left = [&] {
    bool left = false;
    for (auto& c : children)
      if (c.pid > 0 && waitpid(c.pid, nullptr, WNOHANG) == 0) left = true;
    return left;
  };
  while (any_left() && std::chrono::steady_clock::now() < until) usleep(10000);
  for (auto& c : children)
    if (c.pid > 0 && waitpid(c.pid, nullptr, WNOHANG) == 0) kill(c.pid, SIGKILL), waitpid(c.pid, nullptr, 0);
  remove_job_segments(token);
  std::fprintf(stderr, "launch: cannot start rank %d: %s failed: %s%s; the ranks already started were stopped\n", rank,
               what.c_str(), std::strerror(err), limit_hint(err).c_str());
  std::exit(1);
}

std::vector<Child> spawn(const Job& job, int attempt) {
  const auto& o = job.args;
  // 3 pipes a rank (its stdout, its stderr, its notices), 2 log files where asked: the soft
  // limit is raised if it is short (past the hard limit, the rank that cannot start names it).
  engine::dist::raise_open_files(5 * int64_t(o.nproc_per_node) + 16);
  std::vector<Child> children(size_t(o.nproc_per_node));
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Child& c = children[size_t(local)];
    c.rank = o.node_rank * o.nproc_per_node + local;
    c.local_rank = local;
    // Every log is opened before any rank starts: one that cannot be written ends the
    // launcher before it has a rank to stop.
    if (!job.log_run.empty()) {
      const int logged = o.redirects | o.tee;
      try {
        if (logged & 1) c.out.log = engine::dist::launcher::open_rank_log(job.log_run, attempt, local, "stdout.log");
        if (logged & 2) c.err.log = engine::dist::launcher::open_rank_log(job.log_run, attempt, local, "stderr.log");
      } catch (const Error& e) {
        std::fprintf(stderr, "launch: %s; %s\n", e.what(),
                     attempt ? "the restart was not started" : "no rank was started");
        std::exit(1);
      }
      c.out.console = !(o.redirects & 1);
      c.err.console = !(o.redirects & 2);
    }
  }
  for (int local = 0; local < o.nproc_per_node; ++local) {
    Child& c = children[size_t(local)];
    int out[2] = {-1, -1}, err[2] = {-1, -1};
    if (pipe2(out, O_CLOEXEC) != 0 || pipe2(err, O_CLOEXEC) != 0) {  // a rank inherits only its own pipes
      const int e = errno;
      for (int fd : {out[0], out[1]})
        if (fd >= 0) close(fd);
      abandon_start(children, c.rank, "pipe", e, o.token);
    }
    const engine::dist::NoticePipe notes = engine::dist::open_notice_pipe();
    if (notes.read_fd < 0) {
      const int e = errno;
      close(out[0]), close(out[1]), close(err[0]), close(err[1]);
      abandon_start(children, c.rank, "pipe", e, o.token);
    }
    const pid_t launcher = getpid();
    c.pid = fork();
    if (c.pid < 0) {
      const int e = errno;
      close(out[0]), close(out[1]), close(err[0]), close(err[1]), close(notes.read_fd), close(notes.write_fd);
      abandon_start(children, c.rank, "fork", e, o.token);
    }
    if (c.pid == 0) {
      // A rank must not outlive its launcher: if the launcher is killed (kill -9, the OOM
      // killer), the kernel sends the rank SIGTERM, as the launcher itself would have, and
      // on other machines the rank's peers see its connections close at once instead of
      // waiting out the collective timeout. (Checked after setting it: the launcher may
      // already be gone.) SIGPIPE and SIGXFSZ, ignored here (SIGXFSZ by every program of
      // the engine, tensor/program_start.h), go back to their defaults for the program.
      prctl(PR_SET_PDEATHSIG, SIGTERM);
      if (getppid() != launcher) _exit(128 + SIGTERM);
      signal(SIGPIPE, SIG_DFL);
      signal(SIGXFSZ, SIG_DFL);
      // Nor does a rank inherit signals blocked where the launcher was started: a rank that
      // is a script (bash keeps them blocked for what it runs) would never hear the SIGTERM
      // that asks it to stop.
      sigset_t none;
      sigemptyset(&none);
      sigprocmask(SIG_SETMASK, &none, nullptr);
      dup2(out[1], 1), dup2(err[1], 2);
      close(out[0]), close(out[1]), close(err[0]), close(err[1]), close(notes.read_fd);
      fcntl(notes.write_fd, F_SETFD, 0);  // the one descriptor of the launcher's the program keeps
      set_worker_env(job, c, attempt);
      setenv(engine::dist::kNoticeFdVariable, notes.variable.c_str(), 1);
      std::vector<char*> args;
      for (auto& a : o.command) args.push_back(const_cast<char*>(a.c_str()));
      args[0] = const_cast<char*>(job.program.c_str());
      args.push_back(nullptr);
      execvp(args[0], args.data());
      const int e = errno;  // checked before the first rank started; the file may have changed since
      const auto u = engine::dist::launcher::why_not_runnable(job.program);
      std::fprintf(stderr, "launch: cannot run %s: %s\n", job.program.c_str(),
                   u.status ? u.why.c_str() : std::strerror(e));
      _exit(127);
    }
    close(out[1]), close(err[1]), close(notes.write_fd);
    c.out.fd = out[0], c.err.fd = err[0], c.notices.fd = notes.read_fd;
    fcntl(c.out.fd, F_SETFL, O_NONBLOCK), fcntl(c.err.fd, F_SETFL, O_NONBLOCK);
  }
  return children;
}

Job prepare(int argc, char** argv) {
  Job job;
  try {
    job.args = engine::dist::parse_launch_args(std::vector<std::string>(argv + 1, argv + argc),
                                               std::getenv("ENGINE_JOB_TOKEN"), engine::dist::count_machine());
  } catch (const Error& e) {
    usage(e.what());
  }
  if (job.args.help) help();
  auto& o = job.args;
  if (!o.nproc_from.empty()) std::fprintf(stderr, "launch: %s\n", o.nproc_from.c_str());
  // Once, before any rank starts: every rank would fail alike, and the file itself is the problem.
  job.program = engine::dist::launcher::resolve_program(o.command[0]);
  if (const auto u = engine::dist::launcher::why_not_runnable(job.program); u.status) {
    std::fprintf(stderr, "launch: cannot run %s: %s\n", job.program.c_str(), u.why.c_str());
    std::exit(u.status);
  }
  if (o.master_port == 0) {
    try {  // a free port on the rendezvous address; rank 0 will listen on it (in every attempt)
      o.master_port = engine::dist::Listener::bind(engine::dist::listen_address(o.master_addr, o.nnodes > 1), 0).port();
    } catch (const Error& e) {
      usage(std::string("cannot find a free port on ") + o.master_addr + ": " + e.what());
    }
  }
  if (o.token.empty()) o.token = random_token();
  job.endpoint_port = o.master_port;
  if (o.nnodes > 1 && !o.node_rank_given) job.node_store = join_node_rendezvous(o);
  job.launch_id = random_token().substr(0, 16);
  job.world = o.nproc_per_node * o.nnodes;
  if (!o.log_dir.empty() && !(o.redirects | o.tee))
    std::fprintf(stderr,
                 "launch: --log_dir without --redirects or --tee writes no log (as torchrun's): add --tee 3 to keep "
                 "every rank's output there as well as on the console\n");
  if (!o.log_dir.empty() && (o.redirects | o.tee)) {
    try {
      job.log_run = engine::dist::launcher::make_run_log_dir(o.log_dir, o.run_id);
    } catch (const Error& e) {
      std::fprintf(stderr, "launch: %s\n", e.what());
      std::exit(1);
    }
    std::fprintf(stderr, "launch: the ranks' logs go to %s/attempt_N/LOCAL_RANK/\n", job.log_run.c_str());
  }
  return job;
}

// The signals that stop the job as torchrun's do: passed on to its ranks (which save where
// they are, if they can), then the launcher ends saying why. SIGHUP is what an ssh session
// that drops sends; SIGUSR1 and SIGUSR2, a batch scheduler's warning before the time limit.
// A signal the launcher was started ignoring stays ignored, by the ranks too (they inherit
// it): `nohup launch ...` must outlive the terminal (torchrun stops there, "got signal: 1"),
// and a shell starts a background command with SIGINT ignored, so that Ctrl-C spares it.
void install_handlers() {
  for (const int sig : {SIGINT, SIGTERM, SIGHUP, SIGQUIT, SIGUSR1, SIGUSR2}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_IGN) continue;
    signal(sig, on_signal);
    engine::unblock_signal(sig);  // started blocked, it would never reach the handler
  }
  signal(SIGPIPE, SIG_IGN);
  // What the ranks start becomes the launcher's when its parent ends (not init's), so that
  // nothing a rank started outlives the job (launch_watch.cc, end_leftovers).
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  try {
    engine::dist::launcher::install_reaper();
  } catch (const Error& e) {
    usage(e.what());
  }
}

// Under c10d, the machine that failed may be the endpoint's: its launcher, started again,
// serves a new endpoint and picks a new port for rank 0. The others meet it (waiting up to
// ENGINE_DIST_TIMEOUT for it to be back) before they restart, and take their node ranks back.
void meet_new_endpoint_if_gone(Job& job) {
  auto& o = job.args;
  if (!job.node_store || o.node_rank == 0 || engine::dist::endpoint_serves(*job.node_store)) return;
  std::fprintf(stderr,
               "launch: the rendezvous endpoint at %s:%d has gone (its machine failed, or its launcher was "
               "stopped): meeting it again when its launcher is started again\n",
               o.master_addr.c_str(), job.endpoint_port);
  job.node_store.reset();
  o.master_port = job.endpoint_port;
  job.node_store = join_node_rendezvous(o, o.node_rank);
}

// What the launcher did to this machine's other ranks after a failure (nothing, where the
// failed rank was its only one).
std::string others_stopped(const Job& job) {
  return job.args.nproc_per_node > 1 ? "; the other ranks were stopped" : "";
}

}  // namespace

// Runs the group; after a failure, stops it and (--max_restarts) starts it again whole,
// with TORCHELASTIC_RESTART_COUNT one higher, as torchrun does. Resuming is the program's
// part: it finds its checkpoint and continues from it.
static int run(int argc, char** argv) {
  Job job = prepare(argc, argv);
  install_handlers();
  engine::dist::watch_for_stops();  // the job stopped with its launcher (Ctrl-Z) is no rank stopped alone
  std::string first_failure;
  for (int attempt = 0;; ++attempt) {
    const engine::dist::OomKills oom_before = engine::dist::read_oom_kills();
    std::vector<Child> children = spawn(job, attempt);
    // On one machine the launcher sees every rank; on several, the others are told.
    engine::dist::launcher::TellWaiting tell;
    if (job.args.nnodes > 1)
      tell = [&job, attempt](int rank, const std::string& why) {
        return engine::dist::launcher::tell_waiting_ranks(job.args, attempt, rank, why);
      };
    const Outcome out = watch(children, job.args.stopped_timeout, g_signals, oom_before, tell);
    remove_job_segments(job.args.token);
    if (out.reason.empty()) return 0;
    if (first_failure.empty()) first_failure = out.reason;
    if (out.signalled || attempt >= job.args.max_restarts) {
      if (out.signalled) {
        std::fprintf(stderr, "launch: %s: %s\n", out.reason.c_str(), out.ranks_ended.c_str());
      } else if (attempt == 0) {
        std::fprintf(stderr, "launch: %s%s\n", out.reason.c_str(), others_stopped(job).c_str());
      } else {
        std::fprintf(stderr, "launch: %s; giving up after %d restart%s (the first failure: %s)\n", out.reason.c_str(),
                     attempt, attempt == 1 ? "" : "s", first_failure.c_str());
      }
      return out.exit_code ? out.exit_code : 1;
    }
    std::fprintf(stderr, "launch: %s%s; restarting the group (restart %d of %d)\n", out.reason.c_str(),
                 others_stopped(job).c_str(), attempt + 1, job.args.max_restarts);
    meet_new_endpoint_if_gone(job);
  }
}

// Whatever the launcher meets that it did not foresee is said in one line, not an abort: the
// ranks it started get SIGTERM as it exits (PR_SET_PDEATHSIG, set in spawn).
int main(int argc, char** argv) {
  try {
    return run(argc, argv);
  } catch (const std::bad_alloc&) {
    std::fprintf(stderr,
                 "launch: out of memory in the launcher itself (is its address space limited too tightly, ulimit "
                 "-v?); any rank it had started is stopped as it exits\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "launch: %s; any rank it had started is stopped as it exits\n", e.what());
  }
  return 1;
}
