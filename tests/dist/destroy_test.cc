// destroy_process_group's closing barrier: a rank that cannot meet the others there (one
// still busy past the timeout, a machine that stopped answering) says so, since its last
// bytes may not have reached them; a rank that exits without destroying its group, as many
// scripts do, costs the others nothing and no words.
#include <string>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"

using namespace engine::testing;  // run, Run, runfile, kLaunch, kProbe

TEST_CASE("a rank whose closing barrier times out warns that the others may not have all it sent") {
  for (const char* shm : {"1", "0"}) {  // one machine's shared memory, and the TCP path between machines
    INFO("ENGINE_SHM=" << shm);
    const Run r = run(std::string("ENGINE_SHM=") + shm + " ENGINE_DIST_TIMEOUT=1 PROBE_LATE_DESTROY_RANK=1 " + kLaunch +
                      " --nproc_per_node=2 " + kProbe);
    INFO(r.output);
    CHECK(r.status == 0);  // each rank's own work was done
    CHECK_THAT(r.output, Catch::Contains("[rank 0] [destroy_process_group] warning: rank 0 could not meet the other "
                                         "ranks before closing its connections, so they may not have received all "
                                         "it sent: [dist] timed out after 1 s in barrier"));
    CHECK_THAT(r.output, !Catch::Contains("[rank 1] [destroy_process_group]"));  // rank 0 had gone: nothing to say
  }
}

TEST_CASE("a rank that exits without destroy_process_group: the others destroy theirs without a word") {
  const Run r = run("ENGINE_DIST_TIMEOUT=5 PROBE_NO_DESTROY_RANK=1 " + kLaunch + " --nproc_per_node=3 " + kProbe);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, !Catch::Contains("destroy_process_group"));
  CHECK(r.seconds < 5);  // the closed connection ends the barrier at once, not the timeout
}
