// Set up before main() in every program: standard fds open, SIGXFSZ ignored (program_start.h).
#include "tensor/program_start.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>

namespace engine {

int open_closed_standard_fds() {
  int reopened = 0;
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) != -1 || errno != EBADF) continue;
    // open() returns the lowest free number, which is `fd` itself: the ones below it are
    // open (they were, or this loop opened them). Not close-on-exec: children inherit them.
    int got = open("/dev/null", O_RDWR);
    if (got < 0) got = open("/", O_RDONLY | O_DIRECTORY);
    if (got < 0) break;
    if (got != fd) {  // cannot happen (see above); never leave a stray descriptor
      close(got);
      break;
    }
    reopened |= 1 << fd;
  }
  return reopened;
}

void fail_writes_past_file_size_limit() { signal(SIGXFSZ, SIG_IGN); }

namespace {
// Priority 101, the first a program may use: before any other static initialiser of the
// engine could open or write a file.
__attribute__((constructor(101))) void set_up_program() {
  open_closed_standard_fds();
  fail_writes_past_file_size_limit();
}
}  // namespace

}  // namespace engine
