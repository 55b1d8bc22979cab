// The notices a rank sends its launcher (dist/launch_notice.h): written only into the pipe
// the variable names, read back line by line, and anything else ignored.
#include "dist/launch_notice.h"

#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "catch2/catch.hpp"

using namespace engine::dist;

namespace {

// Runs notify_launcher("init 1 2") and notify_launcher("joined") in a child whose notice
// variable is `variable` (the child reads it once, as a rank does), and returns what the
// launcher's side reads from `pipe`.
RankNotices notices_of_child(const NoticePipe& pipe, const std::string& variable) {
  const pid_t pid = fork();
  if (pid == 0) {
    close(pipe.read_fd);
    setenv(kNoticeFdVariable, variable.c_str(), 1);
    notify_launcher("init 1 2");
    notify_launcher("joined");
    _exit(0);
  }
  close(pipe.write_fd);
  int status = 0;
  waitpid(pid, &status, 0);
  RankNotices n;
  n.fd = pipe.read_fd;
  read_notices(n);
  if (n.fd >= 0) close(n.fd);
  return n;
}

std::string inode_of(int fd) {
  struct stat st {};
  fstat(fd, &st);
  return std::to_string(int64_t(st.st_ino));
}

}  // namespace

TEST_CASE("a rank's notices reach the launcher through the pipe the variable names") {
  const NoticePipe pipe = open_notice_pipe();
  REQUIRE(pipe.read_fd >= 0);
  REQUIRE(pipe.variable == std::to_string(pipe.write_fd) + ":" + inode_of(pipe.write_fd));
  const RankNotices n = notices_of_child(pipe, pipe.variable);
  CHECK(n.init_world == 2);
  CHECK(n.joined);
}

TEST_CASE("a descriptor that is not the launcher's pipe is never written to") {
  // The variable inherited by a rank's own subprocess, where that number is another pipe.
  const NoticePipe other = open_notice_pipe();
  const RankNotices wrong_inode =
      notices_of_child(other, std::to_string(other.write_fd) + ":" + inode_of(other.write_fd) + "1");
  CHECK(wrong_inode.init_world == 0);
  CHECK(!wrong_inode.joined);
  for (const std::string bad : {"banana", "7", "-1:5", "2:5", "99999999999:1"}) {
    INFO(bad);
    const NoticePipe p = open_notice_pipe();
    const RankNotices n = notices_of_child(p, bad);
    CHECK(n.init_world == 0);
    CHECK(!n.joined);
  }
}

TEST_CASE("the launcher's side reads whole lines, in pieces, and ignores what is not a notice") {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  RankNotices n;
  n.fd = fds[0];
  auto say = [&](const std::string& text) { REQUIRE(write(fds[1], text.data(), text.size()) == ssize_t(text.size())); };
  say("init 3 2\ninit 1 2x\njoin\n" + std::string(1000, 'j') + "\ninit 1 ");
  close(fds[1]);  // the reads stop at the end of the file, not on an empty pipe
  read_notices(n);
  CHECK(n.init_world == 0);  // rank 3 of 2, trailing junk, a misspelling, a long line, half a line
  CHECK(!n.joined);
  CHECK(n.fd == -1);  // closed at the end of the file

  REQUIRE(pipe(fds) == 0);
  n = RankNotices{};
  n.fd = fds[0];
  say("init 0 ");
  say("4\njoi");
  say("ned\n");
  close(fds[1]);
  read_notices(n);
  CHECK(n.init_world == 4);
  CHECK(n.joined);
}
