// Ranks that run different builds of their program (one machine left with an older build)
// are warned of at the rendezvous, by the ranks concerned and by rank 0; the job runs on.
#include <unistd.h>

#include <filesystem>
#include <string>

#include "catch2/catch.hpp"
#include "dist/same_program.h"
#include "tests/dist/run_command.h"
#include "tests/testing/held_port.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using namespace engine::testing;

TEST_CASE("a program's fingerprint: its size and a hash of its bytes") {
  const std::string& f = dist::program_fingerprint();
  REQUIRE(f.find(':') != std::string::npos);
  CHECK(f.substr(0, f.find(':')) == std::to_string(std::filesystem::file_size("/proc/self/exe")));
  CHECK(f.size() == f.find(':') + 17);  // 16 hex digits
  CHECK(dist::program_path() == std::filesystem::canonical("/proc/self/exe").string());
  CHECK(dist::describe_program("/bin/p", "5397064:9c1e0f2a77d3b410") ==
        "/bin/p, 5,397,064 bytes (fingerprint 9c1e0f2a77d3b410)");
}

namespace {
// Three ranks of the probe on this machine, rank r running programs[r].
Run three_ranks(const std::string (&programs)[3]) {
  const std::string env = "MASTER_ADDR=127.0.0.1 MASTER_PORT=" + std::to_string(held_port()) + " WORLD_SIZE=3 ";
  return run("(" + env + "RANK=1 " + programs[1] + " & " + env + "RANK=2 " + programs[2] + " & " + env + "RANK=0 " +
             programs[0] + "; wait)");
}
}  // namespace

TEST_CASE("a rank that runs another build of the program is named, and the job runs on") {
  const std::string copy = tmp_path("older_probe");
  std::filesystem::copy_file(kProbe, copy, std::filesystem::copy_options::overwrite_existing);
  std::filesystem::permissions(copy, std::filesystem::perms::owner_all);
  run("echo >> " + copy);  // one byte more: an ELF file runs the same, but it is another file
  const Run same = three_ranks({kProbe, kProbe, kProbe});
  INFO(same.output);
  REQUIRE(same.output.find("sum 3") != std::string::npos);
  CHECK(same.output.find("warning") == std::string::npos);

  const Run mixed = three_ranks({kProbe, copy, kProbe});
  INFO(mixed.output);
  CHECK(mixed.status == 0);
  CHECK_THAT(mixed.output, Catch::Contains("[init_process_group] warning: rank 1 (pid ") &&
                               Catch::Contains(") runs another build of the program than rank 0 (pid ") &&
                               Catch::Contains("here " + copy + ", ") && Catch::Contains("; rank 0 runs "));
  CHECK_THAT(mixed.output, Catch::Contains("[init_process_group] warning: rank 1 runs another build of the program "
                                           "than rank 0 (") &&
                               Catch::Contains("each says how: rebuild (or copy) the same program on every machine"));
  CHECK(mixed.output.find("warning: rank 2") == std::string::npos);  // rank 2 runs rank 0's build
  size_t sums = 0;
  for (size_t at = mixed.output.find("sum 3"); at != std::string::npos; at = mixed.output.find("sum 3", at + 1)) ++sums;
  CHECK(sums == 3);
}
