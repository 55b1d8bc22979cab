// Notices from a rank to its launcher (launch_notice.h).
#include "dist/launch_notice.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <charconv>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string_view>

#include "tensor/check.h"
#include "tensor/parse.h"

namespace engine::dist {
namespace {

constexpr size_t kLongestNotice = 256;  // longer lines are not notices; their bytes are dropped

// The notice pipe named by the variable, checked: -1 when there is none or it is not ours.
int notice_fd() {
  const char* v = std::getenv(kNoticeFdVariable);
  if (v == nullptr || *v == '\0') return -1;
  const std::string text = v;
  const size_t colon = text.find(':');
  try {
    if (colon == std::string::npos) throw Error("no ':' between the descriptor and the inode");
    const int fd = int(parse_int(text.substr(0, colon), kNoticeFdVariable, 3, 1 << 30));
    const int64_t inode = parse_int(text.substr(colon + 1), kNoticeFdVariable, 1, INT64_MAX);
    struct stat st {};
    if (fstat(fd, &st) != 0 || !S_ISFIFO(st.st_mode) || int64_t(st.st_ino) != inode) return -1;  // inherited
    fcntl(fd, F_SETFD, FD_CLOEXEC);  // this process's own children are not ranks
    return fd;
  } catch (const Error& e) {
    std::fprintf(stderr, "[dist] warning: %s=\"%s\" is not the launcher's \"FD:INODE\" (%s); ignored\n",
                 kNoticeFdVariable, v, e.what());
    return -1;
  }
}

// An int that is the whole of `text` (an optional '-' and digits, as from_chars reads it).
bool whole_int(std::string_view text, int* value) {
  const auto [end, err] = std::from_chars(text.data(), text.data() + text.size(), *value);
  return err == std::errc() && end == text.data() + text.size();
}

// "joined", or "init RANK WORLD" with 0 <= RANK < WORLD; any other line is not a notice.
void apply(RankNotices& n, std::string_view line) {
  if (line == "joined") n.joined = true;
  if (line.size() > kLongestNotice || line.substr(0, 5) != "init ") return;
  const std::string_view numbers = line.substr(5);
  const size_t space = numbers.find(' ');
  int rank = 0, world = 0;
  if (space == std::string_view::npos || !whole_int(numbers.substr(0, space), &rank) ||
      !whole_int(numbers.substr(space + 1), &world) || rank < 0 || rank >= world)
    return;
  n.init_world = world, n.joined = false;
}

}  // namespace

void notify_launcher(const std::string& line) {
  static const int fd = notice_fd();
  if (fd < 0 || line.size() >= kLongestNotice) return;
  const std::string text = line + "\n";  // one write of under PIPE_BUF bytes: never split
  [[maybe_unused]] const ssize_t n = write(fd, text.data(), text.size());
}

NoticePipe open_notice_pipe() {
  int fds[2];
  if (pipe2(fds, O_CLOEXEC) != 0) return {};  // errno says why
  struct stat st {};
  fstat(fds[1], &st);
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  fcntl(fds[1], F_SETFL, O_NONBLOCK);  // a rank's notice never waits for the launcher
  return {fds[0], fds[1], std::to_string(fds[1]) + ":" + std::to_string(int64_t(st.st_ino))};
}

void read_notices(RankNotices& n) {
  char buf[512];
  while (n.fd >= 0) {
    const ssize_t got = read(n.fd, buf, sizeof buf);
    if (got < 0 && errno == EINTR) continue;
    if (got < 0) return;  // EAGAIN: nothing more for now
    if (got == 0) {
      close(n.fd);
      n.fd = -1;
      return;
    }
    for (ssize_t i = 0; i < got; ++i) {
      if (buf[i] != '\n') {
        if (n.partial.size() <= kLongestNotice) n.partial += buf[i];
        continue;
      }
      apply(n, n.partial);
      n.partial.clear();
    }
  }
}

}  // namespace engine::dist
