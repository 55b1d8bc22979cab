// Started by program_start_test with some of fds 0, 1 and 2 closed. Linked with
// //tensor:program_start and nothing else, it checks what that did before main():
// exit 0: all three open, each one that was closed (argv[1]: a mask) now /dev/null, and a
//         file opened now gets a number above 2;
//         and SIGXFSZ ignored;
// 10 + k: fd k is closed; 20 + k: fd k is not /dev/null; 30: a new file got fd 0, 1 or 2;
// 40: SIGXFSZ is not ignored.
// With `print N STATUS` it prints N lines and exits STATUS.
#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <iostream>
#include <string>

int main(int argc, char** argv) {
  // `print N STATUS`: N lines on stdout, through stdio and iostreams, then exit STATUS (for
  // the check of output that could not be written, made at exit).
  if (argc == 4 && std::string(argv[1]) == "print") {
    for (int i = 0; i < std::atoi(argv[2]); ++i) {
      std::printf("line %d of what a run prints\n", i);
      std::cout << "and its iostream twin " << i << "\n";
    }
    return std::atoi(argv[3]);
  }
  const int closed = argc > 1 ? std::atoi(argv[1]) : 0;
  for (int fd = 0; fd <= 2; ++fd) {
    if (fcntl(fd, F_GETFD) == -1) return 10 + fd;
    if (!(closed & (1 << fd))) continue;
    char target[64] = {};
    const std::string link = "/proc/self/fd/" + std::to_string(fd);
    if (readlink(link.c_str(), target, sizeof target - 1) < 0 || std::string(target) != "/dev/null") return 20 + fd;
  }
  const int fd = open("/proc/self/cmdline", O_RDONLY);
  if (fd >= 0 && fd <= 2) return 30;
  struct sigaction xfsz {};
  return sigaction(SIGXFSZ, nullptr, &xfsz) == 0 && xfsz.sa_handler == SIG_IGN ? 0 : 40;
}
