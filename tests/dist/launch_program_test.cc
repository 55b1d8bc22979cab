// The launcher's check of its program before any rank starts (dist/launch_program.h): each
// way a program cannot run is named with what to do, and what can run passes.
#include "dist/launch_program.h"

#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "tests/testing/tmp_path.h"

using engine::dist::launcher::why_not_runnable;

namespace {
// A file in a fresh folder of the test's own, with `text` and mode `mode`.
std::string file(const std::string& name, const std::string& text, mode_t mode) {
  const std::string dir = engine::testing::tmp_path("programs");
  std::filesystem::create_directories(dir);
  const std::string path = dir + "/" + name;
  std::ofstream(path, std::ios::binary) << text;
  chmod(path.c_str(), mode);
  return path;
}
}  // namespace

TEST_CASE("programs that can run pass: a binary on PATH, a script whose interpreter is there") {
  CHECK(why_not_runnable("true").status == 0);
  CHECK(why_not_runnable("/bin/sh").status == 0);
  CHECK(why_not_runnable(file("ok.sh", "#!/bin/sh\necho hi\n", 0755)).status == 0);
  CHECK(why_not_runnable(file("spaced.sh", "#! /bin/sh -e\necho hi\n", 0755)).status == 0);
  CHECK(why_not_runnable(file("plain", "echo no shebang: the shell runs it\n", 0755)).status == 0);
}

TEST_CASE("a missing program, a directory, a file without its execute bit") {
  const auto missing = why_not_runnable("/nonexistent/program");
  CHECK(missing.status == 127);
  CHECK(missing.why == "no such file");
  const auto bare = why_not_runnable("no-such-program-anywhere");
  CHECK(bare.status == 127);
  CHECK(bare.why == "no program of that name on PATH");
  CHECK(why_not_runnable(engine::testing::tmp_path("")).why == "it is a directory");
  const std::string plain = file("data.bin", "x", 0644);
  const auto not_x = why_not_runnable(plain);
  CHECK(not_x.status == 126);
  CHECK(not_x.why == "it is not executable (chmod +x " + plain + ")");
  // A named pipe with execute bits: reading its first line waited for a writer, for good.
  const std::string fifo = engine::testing::tmp_path("programs/fifo");
  unlink(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0755) == 0);
  chmod(fifo.c_str(), 0755);
  const auto pipe = why_not_runnable(fifo);
  CHECK(pipe.status == 126);
  CHECK(pipe.why == "it is not a regular file");
}

TEST_CASE("a .py file given as torchrun takes it: the interpreter goes first here") {
  const std::string script = file("train.py", "print('hi')\n", 0644);
  CHECK_THAT(why_not_runnable(script).why,
             Catch::Contains("torchrun runs a .py file with python, this launcher runs PROGRAM as it is: put the "
                             "interpreter first (launch ... python3 " +
                             script + ")"));
  // A bare name of a file in the working directory: not on PATH, and said so.
  const std::string cwd = std::filesystem::current_path();
  std::filesystem::current_path(std::filesystem::path(script).parent_path());
  const auto bare = why_not_runnable("train.py");
  std::filesystem::current_path(cwd);
  CHECK_THAT(bare.why, Catch::StartsWith("no program of that name on PATH (a file of that name is in this directory: "
                                         "give its path, ./train.py)"));
}

TEST_CASE("a script whose interpreter is missing, or named with a Windows line ending") {
  const auto gone = why_not_runnable(file("gone.sh", "#!/nonexistent/interpreter\n", 0755));
  CHECK(gone.status == 126);
  CHECK(gone.why == "its interpreter, /nonexistent/interpreter (named on its first line, #!), does not exist here");
  const std::string crlf = file("crlf.sh", "#!/bin/sh\r\necho hi\r\n", 0755);
  CHECK_THAT(why_not_runnable(crlf).why,
             Catch::StartsWith("its first line ends with a carriage return (Windows line endings), so the "
                               "interpreter it names is \"/bin/sh\\r\"") &&
                 Catch::EndsWith("(dos2unix " + crlf + ", or sed -i 's/\\r$//' " + crlf + ")"));
  CHECK(why_not_runnable(file("empty.sh", "#!\n", 0755)).why == "its first line, \"#!\", names no interpreter");
}
