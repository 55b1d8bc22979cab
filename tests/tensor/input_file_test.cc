// Files given to read are looked at without blocking (tensor/input_file.h): what is at a
// name, in words, and whether there is anything there at all.
#include "tensor/input_file.h"

#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>

#include "catch2/catch.hpp"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;
namespace fs = std::filesystem;

TEST_CASE("not_a_file names what is at a path instead of a regular file") {
  const std::string file = tmp_path("input_plain"), fifo = tmp_path("input_fifo"), dir = tmp_path("input_dir");
  std::ofstream(file) << "bytes";
  fs::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_directories(dir);
  CHECK(engine::not_a_file(file).empty());
  CHECK(engine::not_a_file(fifo) == ": it is a named pipe (FIFO), not a file");  // returns: nothing opened it
  CHECK(engine::not_a_file(dir) == ": it is a folder, not a file");
  CHECK(engine::not_a_file("/dev/null") == ": it is a device, not a file");
  CHECK(engine::not_a_file(tmp_path("input_missing")) == ": No such file or directory");
  CHECK(engine::not_a_file(file + "/below") == ": Not a directory");

  // A socket, bound where a file was expected (in /tmp: a socket's path has at most 107
  // bytes, and the test's own folder may be longer).
  const std::string sock = "/tmp/input_file_test." + std::to_string(getpid());
  fs::remove(sock);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  REQUIRE(sock.size() < sizeof addr.sun_path);
  std::strcpy(addr.sun_path, sock.c_str());
  const int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  REQUIRE(bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) == 0);
  CHECK(engine::not_a_file(sock) == ": it is a socket, not a file");
  close(fd);
  fs::remove(sock);

  // A link is followed: to a file it is the file, to nothing it is missing.
  const std::string link = tmp_path("input_link"), dangling = tmp_path("input_dangling");
  fs::remove(link), fs::remove(dangling);
  fs::create_symlink(file, link);
  fs::create_symlink(tmp_path("input_missing"), dangling);
  CHECK(engine::not_a_file(link).empty());
  CHECK(engine::not_a_file(dangling) == ": No such file or directory");
}

TEST_CASE("special_file_at names what a save must not replace: not a file, a link or nothing") {
  const std::string file = tmp_path("special_plain"), fifo = tmp_path("special_fifo"), link = tmp_path("special_link");
  std::ofstream(file) << "bytes";
  fs::remove(fifo), fs::remove(link);
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_symlink("/dev/null", link);
  CHECK(engine::special_file_at(file).empty());
  CHECK(engine::special_file_at(tmp_path("special_missing")).empty());
  CHECK(engine::special_file_at(link).empty());  // the link is replaced, not what it names
  CHECK(engine::special_file_at("/dev/null") == "a device");
  CHECK(engine::special_file_at(fifo) == "a named pipe (FIFO)");
  CHECK(engine::special_file_at(tmp_path("")) == "a folder");
}

TEST_CASE("anything_at is false only where nothing is: what else is there is opened or refused by name") {
  const std::string file = tmp_path("at_plain"), fifo = tmp_path("at_fifo"), dangling = tmp_path("at_dangling");
  std::ofstream(file) << "bytes";
  fs::remove(fifo), fs::remove(dangling);
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  fs::create_symlink(tmp_path("at_missing"), dangling);
  CHECK(engine::anything_at(file));
  CHECK(engine::anything_at(fifo));
  CHECK(engine::anything_at(tmp_path("")));     // the folder
  CHECK(engine::anything_at(file + "/below"));  // not missing: a file is in the way
  CHECK_FALSE(engine::anything_at(tmp_path("at_missing")));
  CHECK_FALSE(engine::anything_at(dangling));
  CHECK_FALSE(engine::anything_at(""));
}
