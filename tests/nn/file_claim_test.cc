// One run at a time for a file saved again and again (nn/file_claim.h): a second claim on
// a claimed file is refused, naming the holder; the claim ends with its owner, however the
// owner ends (killed included); a lock file holding garbage, or something that is not a
// file, is handled with words, never a hang or a crash.
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <memory>
#include <string>

#include "catch2/catch.hpp"
#include "nn/file_claim.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using engine::nn::claim_holder_text;
using engine::nn::FileClaim;
using engine::testing::read_bytes;
using engine::testing::tmp_path;
using engine::testing::write_bytes;

namespace {

// The message a claim on `path` fails with, or "" when it succeeds (and is let go at once).
std::string refusal(const std::string& path) {
  try {
    FileClaim claim(path, "the training state (--state)");
    return "";
  } catch (const std::exception& e) {
    return e.what();
  }
}

}  // namespace

TEST_CASE("a claimed file is refused to a second claim, which names the holder", "[file_claim]") {
  const std::string path = tmp_path("claim_a.safetensors");
  {
    FileClaim first(path, "the training state (--state)");
    REQUIRE(first.held());
    REQUIRE(first.lock_path() == path + ".lock");
    // The lock file says who holds it.
    const std::string words = claim_holder_text(read_bytes(first.lock_path()));
    REQUIRE(words.find("pid " + std::to_string(getpid()) + " on host ") == 0);
    REQUIRE(words.find(", since ") != std::string::npos);

    const std::string why = refusal(path);
    INFO(why);
    REQUIRE(why.find("another run is saving to " + path + " (the training state (--state))") != std::string::npos);
    REQUIRE(why.find("its lock, " + path + ".lock, is held by " + words + ". ") != std::string::npos);
    REQUIRE(why.find("give this run its own path") != std::string::npos);
    // Another file in the same folder is free.
    REQUIRE(refusal(tmp_path("claim_b.safetensors")).empty());
  }
  // Let go with its owner: the next run claims it, and the lock file names the new holder.
  REQUIRE(refusal(path).empty());
}

TEST_CASE("a claim ends with its process, even one killed with SIGKILL", "[file_claim]") {
  const std::string path = tmp_path("claim_killed.safetensors");
  int ready[2];
  REQUIRE(pipe(ready) == 0);
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    // The child claims the file and then waits to be killed. No Catch2 here: exit codes only.
    close(ready[0]);
    try {
      FileClaim claim(path, "the training state (--state)");
      const char ok = claim.held() ? 'y' : 'n';
      [[maybe_unused]] const ssize_t n = write(ready[1], &ok, 1);
      pause();
    } catch (...) {}
    _exit(1);
  }
  close(ready[1]);
  char ok = 0;
  REQUIRE(read(ready[0], &ok, 1) == 1);
  close(ready[0]);
  REQUIRE(ok == 'y');
  const std::string held = refusal(path);
  INFO(held);
  REQUIRE(held.find("pid " + std::to_string(child) + " on host ") != std::string::npos);

  REQUIRE(kill(child, SIGKILL) == 0);
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  REQUIRE(WIFSIGNALED(status));
  // The kernel let go of the lock when the child died: a restarted job claims it at once.
  REQUIRE(refusal(path).empty());
}

TEST_CASE("what a lock file says is shown only as printable words of bounded length, naming no process that ended",
          "[file_claim]") {
  REQUIRE(claim_holder_text("pid 7 on host a, since x\nmore") == "pid 7 on host a, since x");
  REQUIRE(claim_holder_text(std::string("pid \x01\xff", 6)).empty());
  REQUIRE(claim_holder_text(std::string(5000, 'a')).size() == 200);
  REQUIRE(claim_holder_text("").empty());

  // A lock file with garbage in it, held by a claim that has not said who it is yet: the
  // refusal says so and prints none of the garbage.
  const std::string path = tmp_path("claim_garbage.safetensors");
  FileClaim first(path, "the training state (--state)");
  write_bytes(first.lock_path(), std::string("\x1b[2J\x00\xfe", 6) + std::string(100000, 'z'));
  const std::string why = refusal(path);
  INFO(why);
  REQUIRE(why.find("is held by a process that has not yet said which. ") != std::string::npos);
  REQUIRE(why.find("\x1b") == std::string::npos);
  REQUIRE(why.size() < 1000);

  // Words left by an earlier holder of this host whose process has ended (a later holder
  // could not replace them: another user's lock file, opened read-only) name nobody.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  write_bytes(first.lock_path(), "pid " + std::to_string(gone) + " on host " + host + ", since then\n");
  const std::string why_stale = refusal(path);
  INFO(why_stale);
  REQUIRE(why_stale.find("is held by a process that has not yet said which. ") != std::string::npos);
  // Words naming a live process are shown.
  write_bytes(first.lock_path(), "pid " + std::to_string(getpid()) + " on host " + host + ", since now\n");
  REQUIRE(refusal(path).find("is held by pid " + std::to_string(getpid()) + " on host ") != std::string::npos);
}

TEST_CASE("a lock path that is a folder, a FIFO or a link is named, without a hang or a write through it",
          "[file_claim]") {
  const std::string folder = tmp_path("claim_folder.safetensors");
  rmdir((folder + ".lock").c_str());  // left by an earlier run by hand, outside Bazel
  REQUIRE(mkdir((folder + ".lock").c_str(), 0755) == 0);
  const std::string why = refusal(folder);
  INFO(why);
  REQUIRE(why.find(folder + ".lock") != std::string::npos);

  const std::string fifo = tmp_path("claim_fifo.safetensors");
  unlink((fifo + ".lock").c_str());
  REQUIRE(mkfifo((fifo + ".lock").c_str(), 0644) == 0);
  const std::string why_fifo = refusal(fifo);  // a blocking open would wait here for a writer forever
  INFO(why_fifo);
  REQUIRE(why_fifo.find(fifo + ".lock is not a regular file") != std::string::npos);

  // A link where the lock goes is not followed: its target keeps its bytes (the holder's
  // words would have replaced them, as root even in /etc).
  const std::string linked = tmp_path("claim_link.safetensors"), target = tmp_path("claim_link_target");
  write_bytes(target, "precious");
  unlink((linked + ".lock").c_str());
  REQUIRE(symlink(target.c_str(), (linked + ".lock").c_str()) == 0);
  const std::string why_link = refusal(linked);
  INFO(why_link);
  REQUIRE(why_link.find(linked + ".lock is a symbolic link") != std::string::npos);
  REQUIRE(read_bytes(target) == "precious");

  const std::string nowhere = tmp_path("no_such_folder/state.safetensors");
  const std::string why_nowhere = refusal(nowhere);
  INFO(why_nowhere);
  REQUIRE(why_nowhere.find("cannot open " + nowhere + ".lock") != std::string::npos);
  REQUIRE(why_nowhere.find("No such file or directory") != std::string::npos);
}

TEST_CASE("a lock file another user made is claimed through a read-only open", "[file_claim]") {
  // Two users saving into one shared folder in turn: the lock file is the first one's
  // (0644), which the second may read but not write; flock needs no more.
  if (geteuid() != 0) {
    WARN("SKIPPED: acting as another user needs root");
    return;
  }
  char dir[] = "/tmp/file_claim_XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  REQUIRE(chmod(dir, 0777) == 0);
  const std::string path = std::string(dir) + "/state.safetensors";
  { FileClaim root_first(path, "the training state (--state)"); }  // leaves root's lock file
  const pid_t child = fork();
  REQUIRE(child >= 0);
  if (child == 0) {  // as user nobody; exit codes only
    if (setgid(65534) != 0 || setuid(65534) != 0) _exit(3);
    try {
      FileClaim claim(path, "the training state (--state)");
      _exit(claim.held() ? 0 : 1);
    } catch (...) {
      _exit(2);
    }
  }
  int status = 0;
  REQUIRE(waitpid(child, &status, 0) == child);
  std::filesystem::remove_all(dir);
  REQUIRE(WIFEXITED(status));
  if (WEXITSTATUS(status) == 3) {  // Bazel's sandbox maps only root into its user namespace
    std::cout << "SKIPPED: this process cannot become user nobody here" << std::endl;
    WARN("SKIPPED: cannot become user nobody here");
    return;
  }
  REQUIRE(WEXITSTATUS(status) == 0);
}
