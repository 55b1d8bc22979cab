// The launcher's per-rank logs (--log_dir with --redirects and --tee): torchrun's layout,
// D/RUN_ID_XXXXXX/attempt_N/LOCAL_RANK/{stdout,stderr}.log, a folder of its own for every
// launcher (a second run, or another machine sharing D, keeps its logs apart), and a log
// that cannot be written loses nothing.
#include <unistd.h>

#include <filesystem>
#include <iostream>
#include <string>
#include <thread>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using namespace engine::testing;  // run, Run, kLaunch, kProbe, launcher_log_dir, read_bytes, tmp_path

TEST_CASE("--log_dir with --redirects and --tee: per-rank log files, per attempt") {
  const std::string dir = tmp_path("logs");
  const Run r = run("PROBE_FAIL_RANK=1 PROBE_FAIL_ATTEMPTS=1 " + kLaunch +
                    " --nproc_per_node=2 --max_restarts=1 --log_dir " + dir + " --redirects 1 --tee 2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, !Catch::Contains("[rank 0] attempt"));            // stdout: only in the files
  REQUIRE_THAT(r.output, Catch::Contains("[rank 1] failing on purpose"));  // stderr: teed
  const std::string logs = launcher_log_dir(r.output);
  REQUIRE(logs.rfind(dir + "/none_", 0) == 0);  // torchrun's: RUN_ID (none by default), then random
  REQUIRE(logs.size() == dir.size() + 12);
  REQUIRE_THAT(read_bytes(logs + "/attempt_0/1/stdout.log") + read_bytes(logs + "/attempt_0/1/stderr.log"),
               Catch::EndsWith("attempt 0\nfailing on purpose\n"));
  REQUIRE_THAT(read_bytes(logs + "/attempt_1/0/stdout.log"), Catch::Contains("attempt 1\nsum 1\n"));
}

TEST_CASE("launchers given one --log_dir keep their logs apart: a run again, or another machine on a shared disk") {
  // Both used to write D/attempt_0/0/stdout.log: the second run truncated the first run's
  // logs, and two launchers at once (two machines with D on NFS) wrote into one file.
  const std::string dir = tmp_path("shared_logs");
  const std::string each = " --nproc_per_node=2 --log_dir " + dir + " --redirects 3 /bin/sh -c 'echo $0 rank $RANK'";
  Run first, second;
  std::thread other([&] { second = run(kLaunch + " --run_id=job7" + each + " second"); });
  first = run(kLaunch + " --run_id=job7" + each + " first");
  other.join();
  INFO(first.output << second.output);
  REQUIRE((first.status == 0 && second.status == 0));
  const std::string a = launcher_log_dir(first.output), b = launcher_log_dir(second.output);
  REQUIRE((a.rfind(dir + "/job7_", 0) == 0 && b.rfind(dir + "/job7_", 0) == 0 && a != b));
  for (const char* r : {"0", "1"}) {
    CHECK(read_bytes(a + "/attempt_0/" + r + "/stdout.log") == std::string("first rank ") + r + "\n");
    CHECK(read_bytes(b + "/attempt_0/" + r + "/stdout.log") == std::string("second rank ") + r + "\n");
  }
  const Run again = run(kLaunch + each + " third");
  REQUIRE(again.status == 0);
  CHECK(read_bytes(a + "/attempt_0/0/stdout.log") == "first rank 0\n");  // still there
  CHECK(std::distance(std::filesystem::directory_iterator(dir), std::filesystem::directory_iterator()) == 3);
}

TEST_CASE("--log_dir alone writes no log, and says so") {
  const std::string dir = tmp_path("log_dir_alone");
  const Run r = run(kLaunch + " --log_dir " + dir + " /bin/echo hello");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 0] hello") &&
                             Catch::Contains("launch: --log_dir without --redirects or --tee writes no log (as "
                                             "torchrun's): add --tee 3"));
  REQUIRE(!std::filesystem::exists(dir));
}

TEST_CASE("a log folder that cannot be made stops the launcher before any rank starts") {
  const std::string file = tmp_path("a_file");
  write_bytes(file, "not a folder");
  const std::string ran = tmp_path("rank_ran");
  const Run r = run(kLaunch + " --nproc_per_node=2 --log_dir " + file + "/logs --tee 1 /bin/touch " + ran);
  INFO(r.output);
  REQUIRE(r.status == 1);
  REQUIRE_THAT(r.output, Catch::Contains("launch: cannot make the log folder " + file + "/logs (--log_dir): "));
  REQUIRE(!std::filesystem::exists(ran));
}

TEST_CASE("a log file that cannot be written is said once, and its stream goes to the console: nothing is lost") {
  // A full disk (a tmpfs of 64 KiB, filled): every write to a log fails with ENOSPC. The
  // launcher used to write on, losing every line that was only to be logged, silently.
  const std::string dir = tmp_path("full_logs");
  std::filesystem::create_directories(dir);
  const std::string fill = "unshare --mount sh -c 'mount -t tmpfs -o size=64k tmpfs " + dir + " && (head -c 1M " +
                           "/dev/zero > " + dir + "/filler 2>/dev/null; true) && ";
  if (run(fill + "echo ready'").output != "ready\n") {
    std::cout << "SKIPPED: a full disk (unshare --mount, or mounting a tmpfs, is not allowed here)" << std::endl;
    WARN("SKIPPED: unshare --mount is not allowed here");
    return;
  }
  const Run r =
      run(fill + "exec " + kLaunch + " --nproc_per_node=2 --log_dir " + dir + " --redirects 1 " + kProbe + "'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (const char* rank : {"0", "1"}) {
    REQUIRE_THAT(r.output, Catch::Contains(std::string("launch: cannot write rank ") + rank + "'s stdout log " + dir +
                                           "/none_") &&
                               Catch::Contains(std::string("/attempt_0/") + rank +
                                               "/stdout.log (No space left on device): its output goes to the "
                                               "console from here on"));
    REQUIRE_THAT(r.output, Catch::Contains(std::string("[rank ") + rank + "] attempt 0") &&
                               Catch::Contains(std::string("[rank ") + rank + "] sum 1"));
  }
}
