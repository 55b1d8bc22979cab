// What every program sets up before main() (tensor/program_start.h): fds 0, 1 and 2 are
// open in a program started with them closed, so what it opens never takes their numbers
// and what it prints never goes into its files, pipes or sockets; and SIGXFSZ is ignored,
// so a write past the file-size limit fails instead of killing it.
#include "tensor/program_start.h"

#include <fcntl.h>
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
