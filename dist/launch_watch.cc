// The launcher's watch over one attempt's ranks (launch_watch.h).
#include "dist/launch_watch.h"

#include <fcntl.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <utility>
#include <vector>

#include "dist/launch_unjoined.h"
#include "dist/process_state.h"
#include "tensor/check.h"
#include "tools/stop_signals/stop_signals.h"

namespace engine::dist::launcher {

namespace {

// True when the process is stopped by a signal (SIGSTOP, SIGTSTP: state T): it is alive
// but will never answer, and the others will time out waiting for it. A tracing stop
// (state t) is not counted: tools stop a process that way for a moment (LeakSanitizer
// does, at every exit under ASan), and a rank under a debugger is being looked at.
bool is_stopped(pid_t pid) { return process_state(pid) == 'T'; }

// Children are reaped in the SIGCHLD handler, the moment they exit, and reported through a
// pipe in that order. When one rank dies its peers fail a moment later (their connections
// to it close); reaping in order of death is what lets the launcher name the first one.
int g_reaped[2] = {-1, -1};

// Children the launcher had before it started a rank: a process that runs the launcher with
// exec (`sh -c 'helper & exec launch ...'`) hands it its own children. Not the ranks'.
std::vector<pid_t> g_not_the_ranks;
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

// A longer stretch without a newline (binary output, a progress bar redrawn with \r) is
// passed on in pieces of this size: the launcher neither holds it all nor rescans it.
constexpr size_t kLongestLine = 64 * 1024;

// A log file that cannot be written (its disk full, its file system gone read-only) is
// closed and said once, and its stream goes to the console from then on: a log left short
// without a word, or output that was only to be logged, would be lost.
void give_up_log(Stream& s, int rank, int err) {
  char path[512] = {};
  const std::string fd_link = "/proc/self/fd/" + std::to_string(fileno(s.log));
  if (readlink(fd_link.c_str(), path, sizeof path - 1) < 0) std::snprintf(path, sizeof path, "(its file)");
  std::fprintf(stderr, "launch: cannot write rank %d's %s log %s (%s): %s\n", rank, s.name, path, std::strerror(err),
               s.console ? "its output goes on to the console only" : "its output goes to the console from here on");
  std::fclose(s.log);
  s.log = nullptr;
  s.console = true;
}

// Writes each complete line of the stream's buffer to the console (prefixed with the rank)
// and/or to its log file (as the rank wrote it); with `all`, or past kLongestLine, the
// partial line too (the log file gets exactly the bytes the rank wrote).
void flush_lines(Stream& s, FILE* console, int rank, bool all) {
  size_t start = 0, nl;
  std::vector<std::pair<size_t, size_t>> pieces;  // [from, to) of each line written
  auto emit = [&](size_t n, bool ends_line) {
    pieces.push_back({start, start + n});
    if (s.console) std::fprintf(console, "[rank %d] %.*s\n", rank, int(n), s.buf.data() + start);
    if (s.log) std::fprintf(s.log, "%.*s%s", int(n), s.buf.data() + start, ends_line ? "\n" : "");
    start += n + (ends_line ? 1 : 0);
  };
  while ((nl = s.buf.find('\n', start)) != std::string::npos) emit(nl - start, true);
  while (s.buf.size() - start >= kLongestLine) emit(kLongestLine, false);
  if (all && start < s.buf.size()) emit(s.buf.size() - start, false);
  if (s.log && (std::fflush(s.log) != 0 || std::ferror(s.log))) {
    const bool logged_only = !s.console;
    give_up_log(s, rank, errno);
    if (logged_only)  // what this call wrote may not have reached the log
      for (const auto& [from, to] : pieces)
        std::fprintf(console, "[rank %d] %.*s\n", rank, int(to - from), s.buf.data() + from);
  }
  s.buf.erase(0, start);
  if (s.console) std::fflush(console);
}

bool drain(Stream& s, FILE* console, int rank) {
  if (s.fd < 0) return false;
  char tmp[4096];
  const ssize_t n = read(s.fd, tmp, sizeof tmp);
  if (n > 0) {
    s.buf.append(tmp, size_t(n));
    flush_lines(s, console, rank, false);
    return true;
  }
  if (n == 0 || (errno != EAGAIN && errno != EINTR)) {
    flush_lines(s, console, rank, true);
    close(s.fd);
    s.fd = -1;
  }
  return false;
}

std::string describe_status(int status) {
  // 143 = 128 + SIGTERM: what a program that stops on request exits with (having saved, if
  // it saves), and what a shell says when its command was ended by SIGTERM.
  if (WIFEXITED(status) && WEXITSTATUS(status) == kStoppedOnRequest)
    return "exited with status 143 (128 + SIGTERM: it stopped on request)";
  if (WIFEXITED(status)) return "exited with status " + std::to_string(WEXITSTATUS(status));
  if (WIFSIGNALED(status))
    return std::string("was killed by signal ") + std::to_string(WTERMSIG(status)) + " (" +
           strsignal(WTERMSIG(status)) + ")";
  return "stopped";
}

std::string describe_failure(const Child& c, const std::vector<Child>& children, const OomKills& oom_before) {
  std::string reason =
      "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) + ") " + describe_status(c.status);
  // SIGKILL is what the out-of-memory killer sends, and what `kill -9` sends: its count tells them apart.
  if (WIFSIGNALED(c.status) && WTERMSIG(c.status) == SIGKILL) reason += oom_note(oom_before, read_oom_kills());
  // A rank that times out is often not the culprit: the one it waited for is.
  for (auto& other : children)
    if (other.running && is_stopped(other.pid))
      reason = "rank " + std::to_string(other.rank) + " (pid " + std::to_string(other.pid) +
               ") is stopped (SIGSTOP or SIGTSTP), and " + reason + " waiting for it";
  return reason;
}

// Sends `sig` to every rank still running (and SIGCONT, for a stopped one).
void stop_all(std::vector<Child>& children, int sig) {
  for (auto& c : children)
    if (c.running && c.pid > 0) kill(c.pid, sig), kill(c.pid, SIGCONT);
}

// The signal the launcher passes on to its ranks when it is told to stop. A scheduler's
// warning (SIGUSR1, SIGUSR2: Slurm's --signal, submitit) is passed on as it is, since it is
// the ranks' cue to save; the others become SIGTERM (SIGQUIT would dump every rank's core).
int passed_on(int sig) { return sig == SIGUSR1 || sig == SIGUSR2 ? sig : SIGTERM; }

// How the ranks ended after the launcher passed a stop signal on, in words.
std::string how_ranks_ended(const std::vector<Child>& children) {
  const bool all_stopped = std::all_of(children.begin(), children.end(), [](const Child& c) {
    return WIFEXITED(c.status) && WEXITSTATUS(c.status) == kStoppedOnRequest;
  });
  if (all_stopped) return "every rank stopped on request (status 143)";
  std::string said;
  for (const Child& c : children)
    said +=
        (said.empty() ? "" : ", ") + std::string("rank ") + std::to_string(c.rank) + " " + describe_status(c.status);
  return said;
}

// Processes the ranks left behind. The launcher is their subreaper (launch.cc), so a
// process a rank started becomes the launcher's child when its parent ends: a rank that is
// a shell script, stopped, leaves its program running; a rank that started something in
// the background and exited leaves that, holding its output pipe. Once every rank has
// ended, each is sent SIGTERM, and SIGKILL after the grace (torchrun ends its workers'
// process groups the same way), and the launcher says so once. Returns whether any is left.
bool end_leftovers(std::vector<pid_t>& told, Clock::time_point& since, std::chrono::seconds grace) {
  auto left = live_children(getpid());
  left.erase(std::remove_if(left.begin(), left.end(),
                            [](const ChildProcess& c) {
                              return std::find(g_not_the_ranks.begin(), g_not_the_ranks.end(), c.pid) !=
                                     g_not_the_ranks.end();
                            }),
             left.end());
  if (left.empty()) return false;
  const auto now = Clock::now();
  if (told.empty()) {
    since = now;
    std::string which;
    for (const auto& c : left) which += (which.empty() ? "pid " : ", pid ") + std::to_string(c.pid) + ": " + c.name;
    const bool one = left.size() == 1;
    std::fprintf(stderr,
                 "launch: the ranks ended, leaving %zu process%s they started running (%s); %s sent SIGTERM, "
                 "as the job has ended\n",
                 left.size(), one ? "" : "es", which.c_str(), one ? "it was" : "they were");
  }
  for (const auto& c : left) {
    if (std::find(told.begin(), told.end(), c.pid) == told.end())
      told.push_back(c.pid), kill(c.pid, SIGTERM), kill(c.pid, SIGCONT);
    if (now - since > grace) kill(c.pid, SIGKILL);
  }
  return true;
}

// The ranks that failed, in the order they were reaped (each knows when: reaped_at).
using Failures = std::vector<Child*>;

// How long the launcher waits, after a rank exits with an error, for a rank killed by a
// signal to be reaped. A killed process's sockets are closed before it can be reaped, so
// on a loaded machine the peer that read the closed connection and exited can be reaped
// first; it is the consequence, the killed one the cause.
constexpr auto kCauseGrace = std::chrono::milliseconds(1000);

// How long a rank may take between printing its error and exiting (closing its group,
// flushing, its destructors: on a loaded machine more than a second). A rank's last
// stderr output within this of its exit is when it said why it failed.
constexpr auto kExitGrace = std::chrono::milliseconds(5000);

// How long ranks may take to end once stopped, before they are killed (SIGKILL): after a
// failure, 5 s; after the launcher was told to stop, 30 s (torchrun's and Slurm's default),
// time for a rank that saves on request to reach the end of its step and save.
constexpr auto kFailureGrace = std::chrono::seconds(5);
constexpr auto kStopGrace = std::chrono::seconds(30);

// Reaps what exited since the last call.
void reap(std::vector<Child>& children, Failures& failures) {
  int rec[2];
  while (read(g_reaped[0], rec, sizeof rec) == sizeof rec) {
    for (auto& c : children) {
      if (c.pid != rec[0] || !c.running) continue;
      c.status = rec[1];
      c.running = false;
      c.reaped_at = Clock::now();
      if (WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0) continue;
      failures.push_back(&c);
    }
  }
}

// When a rank that exited with an error said why: its last stderr output, if that came
// within kExitGrace of its exit (a program prints its error, then exits), else its exit.
// It is when the launcher read it: two ranks' errors written within one pass of the reads
// (microseconds, more on a loaded machine) may be read in either order.
Clock::time_point said_at(const Child& c) {
  return c.err_at != Clock::time_point{} && c.reaped_at - c.err_at <= kExitGrace ? c.err_at : c.reaped_at;
}

// True when a rank still running printed to stderr before every failed rank said why, and
// recently: most likely the cause, on its way out (its error printed, its exit not yet
// reaped), while the peers that lost it were quicker to exit.
bool cause_still_exiting(const std::vector<Child>& children, const Failures& failures) {
  auto first_said = said_at(*failures.front());
  for (const Child* f : failures) first_said = std::min(first_said, said_at(*f));
  const auto now = Clock::now();
  return std::any_of(children.begin(), children.end(), [&](const Child& c) {
    return c.running && c.err_at != Clock::time_point{} && c.err_at < first_said && now - c.err_at < kExitGrace;
  });
}

// Names the attempt's first failure: a rank killed by a signal over ranks that exited with
// an error (most likely because their peer had gone), else the one that said so first. A
// failing rank prints its error before it exits and closes its connections; the peers that
// then lose it print theirs after, but may be reaped before it. Waits up to
// kCauseGrace for a killed one, and up to kExitGrace for a rank that spoke first to exit,
// unless `now` (no rank is left to wait for) or a rank is stopped (then that one is named,
// by describe_failure).
void decide(std::vector<Child>& children, const Failures& failures, bool now, const OomKills& oom_before, Outcome& out,
            bool& stopping) {
  if (stopping || failures.empty()) return;
  const auto killed =
      std::find_if(failures.begin(), failures.end(), [](const Child* c) { return WIFSIGNALED(c->status); });
  const bool peer_stopped =
      std::any_of(children.begin(), children.end(), [](const Child& c) { return c.running && is_stopped(c.pid); });
  if (killed == failures.end() && !now && !peer_stopped &&
      (Clock::now() - failures.front()->reaped_at < kCauseGrace || cause_still_exiting(children, failures)))
    return;
  const auto earliest = std::min_element(failures.begin(), failures.end(),
                                         [](const Child* a, const Child* b) { return said_at(*a) < said_at(*b); });
  const Child& first = killed != failures.end() ? **killed : **earliest;
  out.exit_code = WIFEXITED(first.status) ? WEXITSTATUS(first.status) : 128 + WTERMSIG(first.status);
  out.reason = describe_failure(first, children, oom_before);
  stopping = true;
}

// A rank stopped (SIGSTOP, SIGTSTP) is alive but will never answer: the others would
// wait for it until their collective timeout. One stopped longer than `limit` seconds ends
// the attempt at once, named.
void check_stopped(std::vector<Child>& children, int limit, Outcome& out, bool& stopping) {
  if (limit <= 0) return;
  const auto now = Clock::now();
  for (auto& c : children) {
    if (!c.running || !is_stopped(c.pid)) {
      c.stopped_since = {};
      continue;
    }
    if (c.stopped_since == Clock::time_point{}) c.stopped_since = now;
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

}  // namespace

void install_reaper() {
  for (const auto& c : live_children(getpid())) g_not_the_ranks.push_back(c.pid);
  if (pipe2(g_reaped, O_CLOEXEC) != 0) throw Error(std::string("pipe failed: ") + std::strerror(errno));
  fcntl(g_reaped[0], F_SETFL, O_NONBLOCK);
  struct sigaction sa {};
  sa.sa_handler = on_child;
  sa.sa_flags = SA_RESTART | SA_NOCLDSTOP;
  sigaction(SIGCHLD, &sa, nullptr);
  engine::unblock_signal(SIGCHLD);  // started blocked, no exit would ever be reported
}

Outcome watch(std::vector<Child>& children, int stopped_timeout, const LauncherSignals& signals,
              const OomKills& oom_before, const TellWaiting& tell_waiting) {
  Outcome out;
  auto stopping_since = Clock::time_point{};
  bool stopping = false;
  int pass_on = SIGTERM;
  Failures failures;
  std::vector<pid_t> leftovers_told;
  auto leftovers_since = Clock::time_point{}, unjoined_since = Clock::time_point{}, next_tell = Clock::time_point{},
       told_at = Clock::time_point{};
  while (true) {
    std::vector<pollfd> fds{{g_reaped[0], POLLIN, 0}};
    for (auto& c : children) {
      if (c.out.fd >= 0) fds.push_back({c.out.fd, POLLIN, 0});
      if (c.err.fd >= 0) fds.push_back({c.err.fd, POLLIN, 0});
      if (c.notices.fd >= 0) fds.push_back({c.notices.fd, POLLIN, 0});
    }
    poll(fds.data(), nfds_t(fds.size()), 50);
    for (auto& c : children) {
      while (drain(c.out, stdout, c.rank)) {}
      while (drain(c.err, stderr, c.rank)) c.err_at = Clock::now();
    }
    const bool was_stopping = stopping;
    reap(children, failures);
    for (auto& c : children) read_notices(c.notices);  // after reaping: all a reaped rank said is in
    bool any_running = false;
    for (auto& c : children) any_running = any_running || c.running;
    if (told_at == Clock::time_point{}) {
      decide(children, failures, !any_running, oom_before, out, stopping);
      if (!stopping) check_stopped(children, stopped_timeout, out, stopping);
      if (!stopping && failures.empty()) check_left_unjoined(children, unjoined_since, out, stopping);
      if (!stopping && tell_other_machines(children, tell_waiting, !any_running, next_tell, out))
        told_at = Clock::now();
    }
    if (!stopping && told_at != Clock::time_point{} && Clock::now() - told_at > kToldGrace) stopping = true;
    const int sig = signals.first;
    if (sig && !stopping) {
      pass_on = passed_on(sig);
      out.reason = std::string("the launcher got signal ") + strsignal(sig) + " and passed " +
                   (pass_on == sig ? "it" : "SIGTERM") + " on to the ranks";
      out.exit_code = 128 + sig;
      out.signalled = stopping = true;
    }
    if (stopping && !was_stopping) stopping_since = Clock::now(), stop_all(children, pass_on);
    // Ranks still running after the grace (or at a second Ctrl-C) are killed.
    const auto grace = out.signalled ? kStopGrace : kFailureGrace;
    if (stopping && (Clock::now() - stopping_since > grace || signals.interrupts >= 2))
      for (auto& c : children)
        if (c.running && c.pid > 0) kill(c.pid, SIGKILL);  // never kill(-1, ...): every process
    bool pipes_open = false;
    any_running = false;
    for (auto& c : children)
      any_running = any_running || c.running, pipes_open = pipes_open || c.out.fd >= 0 || c.err.fd >= 0;
    const bool leftovers = !any_running && end_leftovers(leftovers_told, leftovers_since, kFailureGrace);
    if (!any_running && !leftovers && (!pipes_open || stopping)) break;  // a process ended late may hold a pipe
  }
  for (auto& c : children) {
    for (Stream* st : {&c.out, &c.err}) {
      if (st->fd >= 0) close(st->fd);
      if (st->log) std::fclose(st->log);
    }
    if (c.notices.fd >= 0) close(c.notices.fd);
  }
  if (out.signalled) out.ranks_ended = how_ranks_ended(children);
  return out;
}

}  // namespace engine::dist::launcher
