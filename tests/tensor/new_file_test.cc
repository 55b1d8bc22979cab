// Names beside a file (tensor/new_file.h: leave_room): a name the file system takes keeps
// room for a temporary's or a lock's suffix, cut short only where it must be.
#include "tensor/new_file.h"

#include <string>

#include "catch2/catch.hpp"

using engine::leave_room;

TEST_CASE("leave_room keeps a name that has room, and cuts one that has not to fit in 255 bytes") {
  CHECK(leave_room("out/ck.safetensors", 60) == "out/ck.safetensors");
  CHECK(leave_room("ck", 253) == "ck");                              // 2 + 253 = 255: fits exactly
  const std::string dir = "/a/very/" + std::string(300, 'd') + "/";  // folders are not cut
  const std::string name = std::string(250, 'n') + ".safetensors";
  const std::string cut = leave_room(dir + name, 60);
  REQUIRE(cut.rfind(dir, 0) == 0);
  const std::string part = cut.substr(dir.size());
  CHECK(part.size() + 60 <= 255);
  CHECK(part.size() + 60 >= 250);  // cut no shorter than needed
  CHECK(part.substr(part.size() - 9, 1) == "~");
  CHECK(part.rfind(std::string(100, 'n'), 0) == 0);  // it still begins as the name did
  CHECK(leave_room(dir + name, 60) == cut);          // one name, one cut: every process agrees
  // Two long names alike in their first 186 bytes stay apart.
  CHECK(leave_room(dir + std::string(250, 'n') + ".other", 60) != cut);
  CHECK(leave_room(name, 60).size() == part.size());  // no folder: the same cut
}

TEST_CASE("leave_room does not cut inside a UTF-8 character") {
  std::string name;
  for (int i = 0; i < 120; ++i) name += "\xc3\xa9";  // "é" 120 times: 240 bytes
  const std::string cut = leave_room(name, 20);
  const std::string kept = cut.substr(0, cut.size() - 9);
  CHECK(kept.size() % 2 == 0);  // whole characters only
  CHECK(kept.size() + 9 + 20 <= 255);
  CHECK(kept.size() + 9 + 20 >= 254);
}
