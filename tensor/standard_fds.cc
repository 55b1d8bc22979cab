// Fds 0, 1 and 2 opened on /dev/null where closed, before main() (standard_fds.h).
#include "tensor/standard_fds.h"

#include <fcntl.h>
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

namespace {
// Priority 101, the first a program may use: before any other static initialiser of the
// engine could open a file.
__attribute__((constructor(101))) void keep_standard_fds_open() { open_closed_standard_fds(); }
}  // namespace

}  // namespace engine
