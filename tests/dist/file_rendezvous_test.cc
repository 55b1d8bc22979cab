// The file:// rendezvous (dist/file_rendezvous.h) at its edges: a file that never appears,
// one that names no file, and a file read from outside, bounded in size, in addresses and
// in time. Across emulated machines: tests/dist/multinode_test.sh, part 12.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <fstream>
#include <string>

#include "catch2/catch.hpp"
#include "dist/dist.h"
#include "tests/dist/launch_env.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::testing;
using namespace std::chrono_literals;

TEST_CASE("file:// whose file never appears says where to look") {
  // A folder that is not shared with rank 0's machine looks the same from here: no file.
  clear_launch_env();
  dist::InitOptions o;
  o.init_method = "file://" + tmp_path("never_written");
  o.rank = 1;
  o.world_size = 2;
  o.timeout = 300ms;
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                      Catch::Contains("timed out waiting for rank 0's address in " + tmp_path("never_written")) &&
                          Catch::Contains("it never appeared: rank 0 has not started, or this folder is not on a "
                                          "file system this machine shares with rank 0's"));
  // A named pipe left at the name: reading it waited for a writer, past the timeout, for
  // good. A device: rank 0 would have put its file in its place, and removed it at the end
  // (file:///dev/null). Both are refused at once, on every rank.
  const std::string fifo = tmp_path("fifo_rendezvous");
  unlink(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  for (const std::string& path : {fifo, std::string("/dev/null")}) {
    o.init_method = "file://" + path;
    const auto t0 = std::chrono::steady_clock::now();
    REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                        Catch::Contains("init_method \"file://" + path + "\" names a ") &&
                            Catch::Contains(", not a file: rank 0 puts its own file in its place"));
    CHECK(std::chrono::steady_clock::now() - t0 < 1s);
  }
}

TEST_CASE("a rendezvous file read from outside is bounded: its size, its addresses, the wait") {
  clear_launch_env();
  dist::InitOptions o;
  o.rank = 1;
  o.world_size = 2;
  o.timeout = 1000ms;
  // Rank 0 "on another network", listing 100 addresses where a program takes connections
  // and never answers (a listener that never accepts: 127.0.0.2-101 all reach it). Each
  // is tried at most 2 s, and never past the deadline: 100 s of waiting before.
  const int silent = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in any{};
  any.sin_family = AF_INET;
  socklen_t len = sizeof any;
  REQUIRE((bind(silent, reinterpret_cast<sockaddr*>(&any), sizeof any) == 0 && listen(silent, 128) == 0 &&
           getsockname(silent, reinterpret_cast<sockaddr*>(&any), &len) == 0));
  const std::string listed = tmp_path("listed_rendezvous");
  {
    std::ofstream f(listed);
    f << "0.0.0.0:" << ntohs(any.sin_port) << "\nnetwork elsewhere\n";
    for (int i = 2; i <= 101; ++i) f << "address 127.0.0." << i << "\n";
  }
  o.init_method = "file://" + listed;
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                      Catch::Contains("timed out waiting for rank 0's address in " + listed));
  CHECK(std::chrono::steady_clock::now() - t0 < 3s);
  close(silent);
  for (const char* none : {"file://", "file:///tmp/"}) {  // on every rank, at once
    o.init_method = none;
    REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                        Catch::Contains(std::string("init_method \"") + none + "\" names no file"));
  }
  // A file that is not one: named, with its first 80 bytes.
  const std::string junk = tmp_path("junk_rendezvous");
  std::ofstream(junk) << std::string(100000, 'a');
  o.init_method = "file://" + junk;
  REQUIRE_THROWS_WITH(dist::init_process_group("gloo", o),
                      Catch::Contains("the rendezvous file " + junk + " \"" + std::string(80, 'a') +
                                      "... (65536 bytes)\" should be HOST:PORT"));
}

TEST_CASE("rank 0 writes the rendezvous file through no link put where its temporary goes") {
  // The folder is shared, and the temporary's name (FILE.tmp.PID) predictable: a link
  // there had its target overwritten with rank 0's address.
  clear_launch_env();
  const std::string path = tmp_path("linked_rendezvous"), target = tmp_path("linked_rendezvous_target");
  std::ofstream(target) << "precious";
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  unlink(tmp.c_str());
  REQUIRE(symlink(target.c_str(), tmp.c_str()) == 0);
  dist::InitOptions o;
  o.init_method = "file://" + path;
  o.rank = 0;
  o.world_size = 1;
  o.timeout = 5s;
  dist::init_process_group("gloo", o);
  std::ifstream rendezvous(path), kept(target);
  std::string first, precious;
  rendezvous >> first;
  kept >> precious;
  dist::destroy_process_group();
  CHECK(first.rfind("127.0.0.1:", 0) == 0);
  CHECK(precious == "precious");
}
