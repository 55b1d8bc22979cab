// Fuzzes the launcher's reading of what a rank writes into its notice pipe
// (dist/launch_notice.h): a rank is the user's program, and may write anything there. The
// input goes through a pipe in pieces of varying size; whatever it holds, the reader must
// end at the end of the file with a bounded partial line, and agree with the same lines
// read whole: a world size only from a well-formed "init RANK WORLD" line.
#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <string>

#include "dist/launch_notice.h"

namespace {

// A decimal int written as an optional '-' and digits, whole (a second reading of the
// rule, not launch_notice.cc's code).
bool decimal_int(const std::string& t, long long* v) {
  const size_t digits_from = !t.empty() && t[0] == '-' ? 1 : 0;
  if (t.size() == digits_from) return false;
  for (size_t i = digits_from; i < t.size(); ++i)
    if (t[i] < '0' || t[i] > '9') return false;
  errno = 0;
  *v = std::strtoll(t.c_str(), nullptr, 10);
  return errno == 0 && *v >= INT_MIN && *v <= INT_MAX;
}

// The state the notices leave, applying each whole line in turn.
engine::dist::RankNotices expected(const std::string& text) {
  engine::dist::RankNotices n;
  size_t start = 0, nl;
  while ((nl = text.find('\n', start)) != std::string::npos) {
    const std::string line = text.substr(start, nl - start);
    start = nl + 1;
    if (line == "joined") n.joined = true;
    if (line.size() > 256 || line.compare(0, 5, "init ") != 0) continue;
    const size_t space = line.find(' ', 5);
    long long rank = 0, world = 0;
    if (space != std::string::npos && decimal_int(line.substr(5, space - 5), &rank) &&
        decimal_int(line.substr(space + 1), &world) && rank >= 0 && rank < world)
      n.init_world = int(world), n.joined = false;
  }
  return n;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size > 60000) return 0;  // within a pipe's buffer: written whole before the last read
  int fds[2];
  if (pipe(fds) != 0) std::abort();
  fcntl(fds[0], F_SETFL, O_NONBLOCK);
  engine::dist::RankNotices n;
  n.fd = fds[0];
  // Pieces of 1, 2, 3, ... bytes, read after each: lines split anywhere.
  size_t at = 0;
  for (size_t piece = 1; at < size; ++piece) {
    const size_t k = std::min(piece, size - at);
    if (write(fds[1], data + at, k) != ssize_t(k)) std::abort();
    at += k;
    engine::dist::read_notices(n);
  }
  close(fds[1]);
  engine::dist::read_notices(n);
  if (n.fd != -1) std::abort();  // the end of the file closes it
  if (n.partial.size() > 257) std::abort();
  const engine::dist::RankNotices want = expected(std::string(reinterpret_cast<const char*>(data), size));
  if (n.init_world != want.init_world || n.joined != want.joined) std::abort();
  return 0;
}
