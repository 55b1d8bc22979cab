// Set up before main() in every program: standard fds open, SIGXFSZ ignored, failed output
// reported at exit (program_start.h).
#include "tensor/program_start.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ios>
#include <new>
#include <string>

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
// Whether fd is a pipe or socket whose reader has gone (poll says POLLERR for a write end).
bool reader_gone(int fd) {
  pollfd p{fd, POLLOUT, 0};
  return ::poll(&p, 1, 0) == 1 && (p.revents & POLLERR);
}

// " (PATH)" where fd is a file or device with a name, for the message below; else "".
std::string where(int fd) {
  char path[512] = {};
  const std::string link = "/proc/self/fd/" + std::to_string(fd);
  const ssize_t n = ::readlink(link.c_str(), path, sizeof path - 1);
  return n > 0 && path[0] == '/' ? std::string(" (") + path + ")" : "";
}

// Run by exit() with the status the program exits with. Registered before main(), so it
// runs after every handler and static destructor registered later: their output is in.
// (iostreams write through stdio's buffer, synced with it as they are by default.)
void check_output(int status, void*) {
  const bool failed_before = std::ferror(stdout);
  errno = 0;
  // What is still buffered is written now: where it fails, errno says why. (A failed
  // flush drops the buffer, so this is the one chance to learn the reason.)
  const int err = std::fflush(stdout) == 0 ? 0 : errno;
  if (!failed_before && err == 0) return;
  if (err == EPIPE || (err == 0 && reader_gone(STDOUT_FILENO))) return;  // the reader left (`| head`)
  std::fprintf(stderr, "%s: writing to standard output%s failed%s%s; what it printed there is incomplete\n",
               program_invocation_short_name, where(STDOUT_FILENO).c_str(), err ? ": " : "",
               err ? std::strerror(err) : "");
  if (status != 0) return;
  std::fflush(nullptr);  // every other stream the program left open, as exit() would have
  _exit(1);
}
}  // namespace

void report_failed_output_at_exit() {
  static const bool registered = [] {
    // libstdc++ flushes std::cout when the last std::ios_base::Init is destroyed, in the
    // static destructors, before this check runs; a flush that fails drops what it could
    // not write, and with it the chance to learn why. One Init kept for good leaves that
    // flush to stdio's own at the very end, after this check has made it.
    // (Built in static storage and never destroyed; not on the heap, where leak checkers
    // would count it.)
    alignas(std::ios_base::Init) static unsigned char kept[sizeof(std::ios_base::Init)];
    new (kept) std::ios_base::Init;
    return on_exit(check_output, nullptr) == 0;
  }();
  (void)registered;
}

namespace {
// Priority 101, the first a program may use: before any other static initialiser of the
// engine could open or write a file.
__attribute__((constructor(101))) void set_up_program() {
  open_closed_standard_fds();
  fail_writes_past_file_size_limit();
  report_failed_output_at_exit();
}
}  // namespace

}  // namespace engine
