// What every program sets up before main() (tensor/program_start.h): fds 0, 1 and 2 are
// open in a program started with them closed, so what it opens never takes their numbers
// and what it prints never goes into its files, pipes or sockets; and SIGXFSZ is ignored,
// so a write past the file-size limit fails instead of killing it; and output that could
// not be written is reported at exit.
#include "tensor/program_start.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "catch2/catch.hpp"

namespace {

std::string probe_path() {
  const char* root = std::getenv("TEST_SRCDIR");
  return std::string(root ? root : ".") + "/ddp_engine/tests/tensor/program_start_probe";
}

// Starts the probe with the fds in `mask` closed; its exit status (-1: it did not exit).
int run_probe_with_closed(int mask) {
  const std::string path = probe_path(), arg = std::to_string(mask);
  const pid_t pid = fork();
  if (pid == 0) {
    for (int fd = 0; fd <= 2; ++fd)
      if (mask & (1 << fd)) close(fd);
    execl(path.c_str(), path.c_str(), arg.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace

TEST_CASE("a program started with any of fds 0, 1 and 2 closed has them open on /dev/null, and ignores SIGXFSZ") {
  for (int mask = 0; mask < 8; ++mask) {
    INFO("closed at start (bit k: fd k): "
         << mask
         << "; the probe's status: 10 + k, fd k closed; 20 + k, fd k "
            "not /dev/null; 30, a new file took fd 0, 1 or 2; 40, SIGXFSZ not ignored");
    CHECK(run_probe_with_closed(mask) == 0);
  }
}

TEST_CASE("open_closed_standard_fds opens only those that are closed, and says which") {
  const pid_t pid = fork();
  if (pid == 0) {                                           // no Catch2 here: a child reports through its exit status
    if (engine::open_closed_standard_fds() != 0) _exit(1);  // none closed: none opened
    close(1);
    if (engine::open_closed_standard_fds() != 2) _exit(2);  // bit 1
    char target[64] = {};
    if (readlink("/proc/self/fd/1", target, sizeof target - 1) < 0 || std::string(target) != "/dev/null") _exit(3);
    _exit(0);
  }
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
}

namespace {
struct Printed {
  int status = -1;  // the probe's exit status; -1: it did not exit
  std::string err;  // what it wrote on stderr
};

// Runs `probe print LINES STATUS` with stdout on `out_fd` and SIGPIPE ignored or not.
Printed run_printing_probe(int out_fd, int lines, int status, bool ignore_sigpipe) {
  int err_pipe[2];
  REQUIRE(pipe(err_pipe) == 0);
  const std::string path = probe_path(), n = std::to_string(lines), s = std::to_string(status);
  const pid_t pid = fork();
  if (pid == 0) {
    dup2(out_fd, 1);
    dup2(err_pipe[1], 2);
    signal(SIGPIPE, ignore_sigpipe ? SIG_IGN : SIG_DFL);
    execl(path.c_str(), path.c_str(), "print", n.c_str(), s.c_str(), static_cast<char*>(nullptr));
    _exit(127);
  }
  close(err_pipe[1]);
  Printed p;
  char buf[512];
  for (ssize_t got; (got = read(err_pipe[0], buf, sizeof buf)) > 0;) p.err.append(buf, size_t(got));
  close(err_pipe[0]);
  int st = 0;
  if (pid > 0 && waitpid(pid, &st, 0) == pid && WIFEXITED(st)) p.status = WEXITSTATUS(st);
  return p;
}
}  // namespace

TEST_CASE("output that could not be written is said at exit, and a status of 0 becomes 1") {
  const int full = open("/dev/full", O_WRONLY);
  if (full < 0) {
    WARN("SKIPPED: no /dev/full here to write to");
    return;
  }
  for (int lines : {1, 5000}) {  // all of it still buffered at exit; most of it failed earlier
    INFO(lines << " lines");
    Printed ok = run_printing_probe(full, lines, 0, false);
    CHECK(ok.status == 1);
    CHECK_THAT(ok.err,
               Catch::Contains("program_start_probe: writing to standard output (/dev/full) failed: No space left "
                               "on device; what it printed there is incomplete"));
    Printed failing = run_printing_probe(full, lines, 3, false);
    CHECK(failing.status == 3);  // a failure's own status is kept
    CHECK_THAT(failing.err, Catch::Contains("No space left on device"));
  }
  close(full);
  const int null = open("/dev/null", O_WRONLY);
  Printed quiet = run_printing_probe(null, 5000, 0, false);
  close(null);
  CHECK(quiet.status == 0);
  CHECK(quiet.err.empty());
}

TEST_CASE("a reader that closed its pipe is no failure at exit") {
  int out[2];
  REQUIRE(pipe(out) == 0);
  close(out[0]);  // `| head` that has read what it wanted
  Printed p = run_printing_probe(out[1], 5000, 0, true);
  close(out[1]);
  CHECK(p.status == 0);
  CHECK(p.err.empty());
}
