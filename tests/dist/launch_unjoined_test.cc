// The launcher and ranks that end without joining the group (dist/launch_unjoined.h): a
// rank that returns 0 before init_process_group is named within seconds, on this machine
// and, through rank 0's store, on the others; ranks that joined and finished are not.
#include <string>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/held_port.h"

using namespace engine::testing;  // run, Run, kLaunch, kProbe

TEST_CASE("a rank that exits 0 without joining the group is named within seconds, with a rank that waits for it") {
  // Rank 1 leaves while rank 0 waits for it; rank 0 leaves, and rank 1 waits for its store.
  // Without the launcher's notices both waited out the rendezvous timeout (60 s here).
  for (int leaver : {1, 0}) {
    const Run r = run("ENGINE_DIST_TIMEOUT=60 PROBE_SKIP_INIT_RANK=" + std::to_string(leaver) + " " + kLaunch +
                      " --nproc_per_node=2 " + kProbe);
    INFO(r.output);
    REQUIRE(r.status == 1);
    REQUIRE_THAT(r.output, Catch::Contains("launch: rank " + std::to_string(leaver) + " (pid") &&
                               Catch::Contains("exited with status 0 without joining the group (it never called "
                                               "init_process_group), while rank " +
                                               std::to_string(1 - leaver) +
                                               " waits in init_process_group for all 2 ranks: the group cannot form "
                                               "without it; the other ranks were stopped"));
    REQUIRE(r.seconds < 20);
  }
  // Not said of a rank that joined and ended first (rank 0 holds 3 s before it leaves), nor
  // where no rank joins a group at all.
  const Run joined =
      run("PROBE_NO_DESTROY_RANK=1 PROBE_LATE_DESTROY_RANK=0 " + kLaunch + " --nproc_per_node=2 " + kProbe);
  INFO(joined.output);
  CHECK(joined.status == 0);
  CHECK_THAT(joined.output, !Catch::Contains("without joining"));
  const Run none = run(kLaunch + " --nproc_per_node=2 /bin/sh -c '[ \"$RANK\" = 1 ] || sleep 3'");
  INFO(none.output);
  CHECK(none.status == 0);
  CHECK_THAT(none.output, !Catch::Contains("without joining"));
}

TEST_CASE(
    "on two machines, the other machine's ranks are told through rank 0's store; a rank that joined unseen "
    "is not named") {
  // Two launchers on this host as machines 0 and 1, one rank each; rank 1 leaves. Machine
  // 1's launcher sees no rank of its own waiting: rank 0 learns it from the store.
  const std::string common = "ENGINE_DIST_TIMEOUT=60 " + kLaunch + " --nnodes=2 --nproc_per_node=1 --job_token=t";
  auto both = [&](int port, const std::string& env, const std::string& program) {
    const std::string c = env + " " + common + " --master_port=" + std::to_string(port);
    return run("sh -c '" + c + " --node_rank=1 " + program + " & p=$!; " + c + " --node_rank=0 " + program +
               "; b=$?; wait $p; echo \"statuses $b $?\"'");
  };
  const Run left = both(engine::testing::held_port(), "PROBE_SKIP_INIT_RANK=1", kProbe);
  INFO(left.output);
  CHECK(left.seconds < 30);  // the timeout is 60 s
  CHECK_THAT(left.output, Catch::Contains("statuses 1 1"));
  CHECK_THAT(left.output, Catch::Contains("[rank 0] launch_probe: [launch on ") && Catch::Contains("] rank 1 (pid") &&
                              Catch::Contains("exited with status 0 without joining the group (it never called "
                                              "init_process_group): the group cannot form without it"));
  CHECK_THAT(left.output, Catch::Contains("exited with status 0 without joining the group (it never called "
                                          "init_process_group); the ranks waiting for it were told so through rank "
                                          "0's store"));
  // Ranks whose notices never reach the launcher (as in a container not given the pipe)
  // join, and rank 1 exits 0 while rank 0's store is still up (rank 0 holds 3 s): the store
  // holds rank 1's claim, and nobody is told anything.
  const Run unseen = both(engine::testing::held_port(), "PROBE_NO_DESTROY_RANK=1 PROBE_LATE_DESTROY_RANK=0",
                          "env -u ENGINE_LAUNCH_NOTICE_FD " + kProbe);
  INFO(unseen.output);
  CHECK_THAT(unseen.output, Catch::Contains("statuses 0 0") && Catch::Contains("[rank 1] sum 1"));
  CHECK_THAT(unseen.output, !Catch::Contains("without joining"));
}
