// The launcher: environment per rank, output labelled by rank, and on a failure the other
// ranks stopped with the failing rank's status and a one-line reason. Signals to the launcher
// and ranks stopped too long: launch_signals_test.cc.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/held_port.h"
#include "tests/testing/tmp_path.h"

using namespace engine::testing;  // run, Run, runfile, kLaunch, kProbe

TEST_CASE("each rank gets its environment; every line is labelled with its rank") {
  const Run r = run(kLaunch + " --nproc_per_node=3 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 0);
  for (int k = 0; k < 3; ++k) {
    REQUIRE_THAT(r.output, Catch::Contains("[rank " + std::to_string(k) + "] rank " + std::to_string(k) +
                                           " of 3 local " + std::to_string(k) + "/3 token set sigpipe default"));
    REQUIRE_THAT(r.output, Catch::Contains("[rank " + std::to_string(k) + "] sum 3"));
  }
}

TEST_CASE("a rank starts with no signal ignored that the launcher ignores for itself") {
  // The launcher ignores SIGPIPE, and SIGXFSZ as every program of the engine does
  // (tensor/program_start.h); a rank that is not one of them gets the defaults.
  const Run r = run(kLaunch + " --nproc_per_node=1 grep SigIgn /proc/self/status");
  INFO(r.output);
  CHECK(r.status == 0);
  const std::string tag = "[rank 0] SigIgn:\t";
  const size_t at = r.output.find(tag);
  REQUIRE(at != std::string::npos);
  const unsigned long long ignored =
      std::stoull(r.output.substr(at + tag.size(), 16), nullptr, 16);  // bit k: signal k+1
  CHECK((ignored >> (SIGPIPE - 1) & 1) == 0);
  CHECK((ignored >> (SIGXFSZ - 1) & 1) == 0);
}

TEST_CASE("a final line without a newline is still printed, labelled") {
  const Run r = run("PROBE_PRINT_PARTIAL=1 " + kLaunch + " --standalone --nproc_per_node=2 " + kProbe);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 1] no newline"));
}

TEST_CASE("a long stretch without a newline is passed on in pieces, and logged exactly") {
  // 4 MiB of 'x' and no newline: the launcher held it all and searched the whole of it for
  // a newline after every 4 KiB it read (100 MB took it 27 s, and it watched no rank then).
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/long";
  const Run r = run(kLaunch + " --nproc_per_node=1 --log_dir " + dir +
                    " --tee 1 bash -c 'head -c 4194304 /dev/zero | tr \"\\0\" x; echo; echo done'");
  REQUIRE(r.status == 0);
  size_t pieces = 0;
  for (size_t at = r.output.find("[rank 0] x"); at != std::string::npos; at = r.output.find("[rank 0] x", at + 1))
    ++pieces;
  CHECK(pieces == 64);  // 4 MiB in pieces of 64 KiB
  CHECK_THAT(r.output, Catch::EndsWith("[rank 0] done\n"));
  std::ifstream log(launcher_log_dir(r.output) + "/attempt_0/0/stdout.log", std::ios::binary);
  const std::string logged((std::istreambuf_iterator<char>(log)), std::istreambuf_iterator<char>());
  CHECK(logged == std::string(4 << 20, 'x') + "\ndone\n");
}

TEST_CASE("a launcher started with stdin and stdout closed runs its ranks to the end") {
  // Its first pipe then took fds 0 and 1, the one its SIGCHLD handler reports exits
  // through: the ranks' output was written into it, and once 64 KiB filled it, the launcher
  // blocked writing to it for good (SIGTERM could not end it). 50 MB from each rank here.
  const Run r =
      run("timeout -s KILL 20 bash -c 'exec " + kLaunch + " --nproc_per_node=2 head -c 50000000 /dev/zero <&- >&-'");
  INFO(r.output);
  CHECK(r.status == 0);  // 137: killed by the timeout
  CHECK(r.seconds < 20);
}

TEST_CASE("when a rank fails, the others are stopped and its status is returned with a reason") {
  const Run r = run("PROBE_FAIL_RANK=1 " + kLaunch + " --nproc_per_node=3 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 3);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 1] failing on purpose"));
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 1 (pid") &&
                             Catch::Contains("exited with status 3; the other ranks were stopped"));
  REQUIRE(r.seconds < 15);
  // A machine's only rank: there were no others to stop, and the launcher does not say so.
  const Run alone = run("PROBE_FAIL_RANK=0 " + kLaunch + " --nproc_per_node=1 " + kProbe);
  INFO(alone.output);
  CHECK(alone.status == 3);
  CHECK_THAT(alone.output, Catch::Contains("exited with status 3\n") && !Catch::Contains("other ranks"));
}

TEST_CASE("the rank that failed first is named, not a peer that lost it and was reaped before it") {
  // Rank 0 fails, and its peers, which lose it, fail too; as it exits, rank 0 closes its
  // connections before it can be reaped, so they were often reaped first. Then the same
  // with rank 0 lingering after leaving the group: surely reaped last, and at 1.5 s later
  // than its peers, as a loaded machine can make it. The rank that said so first is the
  // cause.
  for (const char* linger : {"", "", "", "PROBE_LINGER_MS=300 ", "PROBE_LINGER_MS=1500 "}) {
    const Run r = run(std::string(linger) + "PROBE_FAIL_RANK=0 " + kLaunch + " --nproc_per_node=3 " + kProbe);
    INFO(r.output);
    REQUIRE(r.status == 3);
    REQUIRE_THAT(r.output, Catch::Contains("launch: rank 0 (pid") && Catch::Contains("exited with status 3"));
  }
}

TEST_CASE("node ranks and multi-node arguments") {
  // Node 1 of 2 with 2 processes per node: ranks 2 and 3 of 4. Without node 0 they cannot
  // rendezvous, so only the environment is checked, through a shell.
  const Run r = run(kLaunch +
                    " --nnodes=2 --node_rank=1 --nproc_per_node=2 --master_port=29999 --job_token=t "
                    "/bin/sh -c 'echo $RANK/$WORLD_SIZE/$LOCAL_RANK/$GROUP_RANK/$MASTER_PORT/$ENGINE_JOB_TOKEN'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 2] 2/4/0/1/29999/t") && Catch::Contains("[rank 3] 3/4/1/1/29999/t"));
  REQUIRE_THAT(run(kLaunch + " --nnodes=2 --nproc_per_node=1 /bin/true").output, Catch::Contains("same --master_port"));
  REQUIRE_THAT(run(kLaunch + " --nproc_per_node=0 /bin/true").output, Catch::Contains("--nproc_per_node expects"));
  REQUIRE_THAT(run(kLaunch + " --bogus /bin/true").output, Catch::Contains("unknown flag --bogus"));
  // Every node names its place: two launchers that both defaulted to node 0 would each
  // start ranks 0 and 1.
  const Run no_rank = run(kLaunch + " --nnodes=2 --master_port=29999 --job_token=t /bin/true");
  REQUIRE(no_rank.status == 2);
  REQUIRE_THAT(no_rank.output, Catch::Contains("give each node its --node_rank"));
  const Run missing = run(kLaunch + " --nproc_per_node=1 /nonexistent/program");
  REQUIRE(missing.status == 127);
  REQUIRE_THAT(missing.output, Catch::Contains("cannot run /nonexistent/program"));
}

TEST_CASE("machines whose launchers differ in --nproc_per_node are told to give every launcher the same") {
  // Two launchers on this host as machines 0 and 1: 2 + 2 processes expect a world of 4,
  // machine 1's 3 processes a world of 6.
  const std::string common = "ENGINE_DIST_TIMEOUT=60 " + kLaunch +
                             " --nnodes=2 --master_port=" + std::to_string(engine::testing::held_port()) +
                             " --job_token=t";
  const Run r = run("sh -c '" + common + " --node_rank=1 --nproc_per_node=3 " + kProbe + " & " + common +
                    " --node_rank=0 --nproc_per_node=2 " + kProbe + "; wait'");
  INFO(r.output);
  REQUIRE(r.seconds < 30);  // the timeout is 60 s
  // Said as what it is, not as the RANKs both machines then start, nor as their WORLD_SIZEs.
  REQUIRE_THAT(r.output, Catch::Contains("the machines' launchers started different numbers of ranks: node 0's (") &&
                             Catch::Contains(") 2 ranks, node 1's (") &&
                             Catch::Contains(") 3 ranks. Give every launcher the same --nproc_per_node (auto, cpu "
                                             "and gpu count each machine's own CPUs or GPUs, which may differ: give "
                                             "a number there)"));
  REQUIRE_THAT(r.output, !Catch::Contains("two processes claim") && !Catch::Contains("disagree on WORLD_SIZE"));
}

TEST_CASE("two machines given the same --node_rank are told to give each its own") {
  // Three launchers as machines 0, 1 and 1: both "machine 1" launchers start RANK=1.
  const std::string common = "ENGINE_DIST_TIMEOUT=60 " + kLaunch + " --nnodes=3 --nproc_per_node=1 --master_port=" +
                             std::to_string(engine::testing::held_port()) + " --job_token=t";
  const Run r = run("sh -c '" + common + " --node_rank=1 " + kProbe + " & " + common + " --node_rank=1 " + kProbe +
                    " & " + common + " --node_rank=0 " + kProbe + "; wait'");
  INFO(r.output);
  REQUIRE(r.seconds < 30);  // the timeout is 60 s
  REQUIRE_THAT(r.output, Catch::Contains("two processes claim RANK=1: ") &&
                             Catch::Contains("both were started by launchers given --node_rank=1: give each machine's "
                                             "launcher its own --node_rank, from 0 to --nnodes - 1"));
}

TEST_CASE("--help and -h describe every flag and start nothing; torchrun's short -r and -t are flags") {
  for (const char* h : {" --help", " -h", " --nproc_per_node=2 --help /bin/false"}) {
    const Run r = run(kLaunch + h);
    INFO(h << "\n" << r.output);
    REQUIRE(r.status == 0);
    for (const char* flag : {"--nproc_per_node N", "--nnodes N", "--node_rank R", "--master_addr A", "--master_port P",
                             "--standalone", "--job_token T", "--max_restarts N", "--run_id ID", "--stopped_timeout S",
                             "--log_dir D", "-r, --redirects M", "-t, --tee M", "ENGINE_SOCKET_IFNAME"})
      REQUIRE_THAT(r.output, Catch::Contains(flag));
    REQUIRE_THAT(r.output, !Catch::Contains("[rank 0]"));
  }
  const std::string dir = engine::testing::tmp_path("launch_short_flags");
  const Run r = run(kLaunch + " --log_dir " + dir + " -r 1 -t=2 /bin/sh -c 'echo out; echo err >&2'");
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, !Catch::Contains("[rank 0] out") && Catch::Contains("[rank 0] err"));
  REQUIRE(launcher_log_dir(r.output).rfind(dir + "/none_", 0) == 0);
  std::ifstream log(launcher_log_dir(r.output) + "/attempt_0/0/stdout.log");
  std::stringstream text;
  text << log.rdbuf();
  REQUIRE(text.str() == "out\n");
  REQUIRE_THAT(run(kLaunch + " --bogus /bin/true").output, Catch::Contains("launch --help says"));
}

TEST_CASE("torchrun's rendezvous flags: --rdzv_endpoint, --rdzv_backend, --nnodes=N:N, --no_python") {
  const std::string show = " /bin/sh -c 'echo $MASTER_ADDR:$MASTER_PORT/$RANK/$WORLD_SIZE'";
  const Run r = run(kLaunch +
                    " --nnodes=2:2 --node_rank=1 --rdzv_endpoint=127.0.0.2:29444 --rdzv_backend=c10d --rdzv_id=7 "
                    "--job_token=t --no_python" +
                    show);
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 1] 127.0.0.2:29444/1/2"));
  REQUIRE_THAT(
      run(kLaunch + " --nnodes 2 --node_rank 0 --rdzv-endpoint localhost --rdzv-backend static --job_token t" + show)
          .output,
      Catch::Contains("[rank 0] localhost:29400/0/2"));  // torchrun's default port
  for (const auto& [flags, why] : std::vector<std::pair<std::string, std::string>>{
           {"--nnodes=1:4", "elastic jobs (a range of node counts) are not supported"},
           {"--rdzv_backend=etcd", "--rdzv_backend expects c10d or static"},
           {"--rdzv_endpoint=:29400", "no host"},
           {"--rdzv_endpoint=h:99999", "--rdzv_endpoint's port expects an integer in 1..65535"},
           {"--rdzv_endpoint=[::1", "missing ']'"},
           {"--rdzv_endpoint=[::1]:29400", "is an IPv6 address; the engine's sockets speak IPv4 only"},
           {"--master_addr=fe80::1", "is an IPv6 address"}}) {
    const Run bad = run(kLaunch + " " + flags + " /bin/true");
    INFO(flags << "\n" << bad.output);
    REQUIRE(bad.status == 2);
    REQUIRE_THAT(bad.output, Catch::Contains(why));
  }
}

TEST_CASE("torchrun's --nproc_per_node=auto, cpu and gpu: counted on this machine, and said") {
  // One CPU (taskset), and no GPU visible (CUDA_VISIBLE_DEVICES empty), wherever this runs.
  const std::string one_cpu = "CUDA_VISIBLE_DEVICES= taskset -c 0 " + kLaunch;
  const std::string show = " /bin/sh -c 'echo $RANK/$WORLD_SIZE'";
  const Run cpu = run(one_cpu + " --nproc_per_node=cpu" + show);
  INFO(cpu.output);
  CHECK(cpu.status == 0);
  CHECK_THAT(cpu.output,
             Catch::Contains("launch: --nproc_per_node=cpu: 1 rank, one per CPU this launcher may run on") &&
                 Catch::Contains("[rank 0] 0/1") && !Catch::Contains("[rank 1]"));
  const Run two = run("CUDA_VISIBLE_DEVICES= taskset -c 0,1 " + kLaunch + " --nproc-per-node auto" + show);
  INFO(two.output);
  if (std::thread::hardware_concurrency() >= 2)
    CHECK_THAT(two.output, Catch::Contains("2 ranks, one per CPU this launcher may run on (no GPU is visible)") &&
                               Catch::Contains("[rank 1] 1/2"));
  const Run gpu = run(one_cpu + " --nproc_per_node=gpu /bin/true");
  INFO(gpu.output);
  CHECK(gpu.status == 2);
  CHECK_THAT(gpu.output, Catch::Contains("--nproc_per_node=gpu: no GPU is visible here (") &&
                             Catch::Contains("CUDA_VISIBLE_DEVICES=\"\")"));
  const Run junk = run(kLaunch + " --nproc_per_node=all /bin/true");
  CHECK(junk.status == 2);
  CHECK_THAT(junk.output, Catch::Contains("expects an integer in 1..1024, or auto, cpu or gpu, got \"all\""));
}

TEST_CASE("--rdzv_backend=c10d without --node_rank: the launchers get node ranks at the endpoint") {
  // The same command twice, as on two machines: the first to listen on the endpoint serves
  // it and is node 0, the other is node 1; rank 0 listens on a port node 0 picked.
  // Ports held for this test, each endpoint its own (not numbers a run beside it may hold).
  const int port = engine::testing::held_port(), port1 = engine::testing::held_port(),
            port3 = engine::testing::held_port(), port4 = engine::testing::held_port();
  const std::string same =
      kLaunch + " --nnodes=2 --nproc_per_node=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port) +
      " --job_token=t " + kProbe;
  Run first;
  std::thread host([&] { first = run(same); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Run second = run(same);
  host.join();
  INFO(first.output << "\n---\n" << second.output);
  REQUIRE(first.status == 0);
  REQUIRE(second.status == 0);
  REQUIRE_THAT(first.output, Catch::Contains("launch: node rank 0 of 2, handed out at the rendezvous (served here)"));
  REQUIRE_THAT(second.output, Catch::Contains("launch: node rank 1 of 2"));
  for (int r = 0; r < 4; ++r)
    REQUIRE_THAT(first.output + second.output, Catch::Contains("[rank " + std::to_string(r) + "] sum 6"));
  REQUIRE_THAT(first.output, !Catch::Contains("127.0.0.1:" + std::to_string(port) + "\n"));  // rank 0's port is another
  // A third launcher for a job of two machines waits (up to ENGINE_DIST_TIMEOUT) for a node
  // rank to be freed: refused, naming --nnodes, if none is; given the rank a launcher that
  // ends frees while it waits.
  const std::string job = " --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port1) +
                          " --job_token=t /bin/sleep ";
  Run a, b;
  std::thread t1([&] { a = run(kLaunch + job + "8"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  std::thread t2([&] { b = run(kLaunch + job + "4"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Run third = run("ENGINE_DIST_TIMEOUT=2 " + kLaunch + job + "0");
  INFO(third.output);
  REQUIRE(third.status == 1);
  REQUIRE_THAT(third.output, Catch::Contains("waiting for one to be freed") &&
                                 Catch::Contains("every node rank of the 2 at 127.0.0.1:" + std::to_string(port1) +
                                                 " (--nnodes) is held by a running launcher"));
  REQUIRE(third.seconds >= 1.9);
  const Run fourth = run("ENGINE_DIST_TIMEOUT=30 " + kLaunch + job + "0");  // node 1 ends at about 4 s
  t1.join(), t2.join();
  INFO(fourth.output);
  REQUIRE(fourth.status == 0);
  REQUIRE_THAT(fourth.output, Catch::Contains("launch: node rank 1 of 2"));
  // A launcher killed (its machine failed) frees its node rank: started again, it takes it
  // back. Before, the new launcher was refused as a third launcher of a job of two.
  const std::string c10d = kLaunch +
                           " --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port4) +
                           " --job_token=t ";
  const Run again = run("{ " + c10d + "/bin/sleep 3 & host=$!; sleep 0.3; " + c10d +
                        "/bin/sleep 30 & lost=$!; sleep 0.5; kill -9 $lost; wait $lost; " + c10d +
                        "/bin/true; echo \"again: $?\"; wait $host; }");
  INFO(again.output);
  REQUIRE_THAT(again.output, Catch::Contains("again: 0"));
  size_t node1 = 0;
  for (size_t at = again.output.find("launch: node rank 1 of 2"); at != std::string::npos;
       at = again.output.find("launch: node rank 1 of 2", at + 1))
    ++node1;
  REQUIRE(node1 == 2);  // the first launcher, then the one started again
  // A launcher started with another --nproc_per_node would start RANKs the other machine
  // has: refused at the rendezvous, naming both commands' flags. Here it is the one command,
  // --nproc_per_node=auto, on a machine with fewer CPUs (taskset: this launcher may run on 1).
  const std::string endpoint = " --nnodes=2 --rdzv_backend=c10d --rdzv_endpoint=127.0.0.1:" + std::to_string(port3);
  Run serving;
  std::thread t3([&] { serving = run(kLaunch + endpoint + " --nproc_per_node=2 --job_token=t /bin/sleep 1"); });
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  const Run other = run("taskset -c 0 " + kLaunch + endpoint + " --nproc_per_node=auto --job_token=t /bin/true");
  t3.join();
  INFO(other.output);
  REQUIRE(other.status == 1);
  REQUIRE_THAT(other.output,
               Catch::Contains("this launcher was started with --nnodes 2 --nproc_per_node 1 "
                               "--max_restarts 0, the one serving the rendezvous at 127.0.0.1:" +
                               std::to_string(port3) + " with --nnodes 2 --nproc_per_node 2 --max_restarts 0") &&
                   Catch::Contains("(here --nproc_per_node=auto: 1 rank, one per CPU this launcher may run on") &&
                   Catch::Contains(": where the machines differ, give --nproc_per_node a number)"));
  // Without c10d, a missing --node_rank stays an error.
  REQUIRE_THAT(run(kLaunch + " --nnodes=2 --rdzv_endpoint=127.0.0.1:29792 --job_token=t /bin/true").output,
               Catch::Contains("give each node its --node_rank") && Catch::Contains("--rdzv_backend=c10d"));
}

TEST_CASE("a stopped rank is named by the launcher, not the survivor that timed out waiting for it") {
  const Run r = run("PROBE_STOP_RANK=1 ENGINE_DIST_TIMEOUT=2 " + kLaunch + " --nproc_per_node=2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 1);
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 1 (pid") &&
                             Catch::Contains("is stopped (SIGSTOP or SIGTSTP), and rank 0 (pid") &&
                             Catch::Contains("exited with status 1 waiting for it"));
  REQUIRE(r.seconds < 15);
}

TEST_CASE("shared-memory names a killed rank left are removed when the job ends") {
  const Run r = run("PROBE_LEAK_SHM=1 " + kLaunch + " --nproc_per_node=2 --job_token=leak-test " + kProbe);
  INFO(r.output);
  const size_t at = r.output.find("left /dev/shm/");
  REQUIRE(at != std::string::npos);
  const std::string path = r.output.substr(at + 5, r.output.find(' ', at + 5) - at - 5);
  REQUIRE(path.rfind("/dev/shm/engine-", 0) == 0);
  REQUIRE(r.status == 128 + 9);
  REQUIRE(access(path.c_str(), F_OK) != 0);  // gone
}

TEST_CASE("a rank killed just after a peer exited with an error is named as the cause") {
  // What a killed rank looks like on a loaded machine: its sockets close before it can be
  // reaped, so the peer that read the closed connection and exited is reaped first.
  const Run r =
      run("PROBE_FAIL_RANK=1 PROBE_KILL_RANK=0 PROBE_KILL_AFTER_MS=200 " + kLaunch + " --nproc_per_node=2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 128 + 9);
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 0 (pid") && Catch::Contains("was killed by signal 9"));
}

TEST_CASE("two jobs started together on one port with one token: each ends within seconds, the loser told why") {
  const std::string dir = std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp";
  for (int round = 0; round < 3; ++round) {
    // Each rank holds its job's store up for 2 s: on a loaded machine the second job could
    // otherwise start only after the first has ended, and then both rightly succeed.
    const std::string job = "ENGINE_DIST_TIMEOUT=60 PROBE_HOLD_MS=2000 " + kLaunch +
                            " --nproc_per_node=2 --master_port=" + std::to_string(29650 + round) +
                            " --job_token=same " + kProbe;
    const Run r = run("sh -c '" + job + " >" + dir + "/a.log 2>&1 & " + job + " >" + dir + "/b.log 2>&1 & wait; cat " +
                      dir + "/a.log " + dir + "/b.log'");
    INFO("round " << round << ":\n" << r.output);
    REQUIRE(r.seconds < 20);  // the timeout is 60 s
    const bool someone_failed = r.output.find("launch: rank") != std::string::npos;
    REQUIRE(someone_failed);  // one port cannot serve two jobs
    REQUIRE_THAT(r.output, Catch::Contains("perhaps another job, holds this port") ||
                               Catch::Contains("another job is using MASTER_PORT") ||
                               Catch::Contains("two processes claim RANK") ||
                               Catch::Contains("another job that held this port has just ended"));
  }
}

TEST_CASE("--max_restarts: the whole group starts again with TORCHELASTIC_RESTART_COUNT one higher") {
  const Run r =
      run("PROBE_FAIL_RANK=1 PROBE_FAIL_ATTEMPTS=1 " + kLaunch + " --nproc_per_node=2 --max_restarts=2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 0);
  REQUIRE_THAT(r.output, Catch::Contains("launch: rank 1 (pid") &&
                             Catch::Contains("exited with status 3; the other ranks were stopped; restarting the group "
                                             "(restart 1 of 2)"));
  REQUIRE_THAT(r.output, Catch::Contains("[rank 0] attempt 1") && Catch::Contains("[rank 1] attempt 1") &&
                             Catch::Contains("[rank 1] sum 1"));
}

TEST_CASE("--max_restarts: after N restarts the launcher gives up, naming the first failure") {
  const Run r = run("PROBE_FAIL_RANK=1 " + kLaunch + " --nproc_per_node=2 --max_restarts=2 " + kProbe);
  INFO(r.output);
  REQUIRE(r.status == 3);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 1] attempt 2") && Catch::Contains("restart 2 of 2") &&
                             Catch::Contains("giving up after 2 restarts (the first failure: rank 1 (pid"));
}

TEST_CASE("a rank killed by a signal is named first, not the peer that failed because of it") {
  for (int round = 0; round < 3; ++round) {
    const Run r = run("PROBE_KILL_RANK=1 " + kLaunch + " --nproc_per_node=3 " + kProbe);
    INFO("round " << round << ": " << r.output);
    REQUIRE(r.status == 128 + 9);
    REQUIRE_THAT(r.output, Catch::Contains("launch: rank 1 (pid") && Catch::Contains("was killed by signal 9"));
  }
}

TEST_CASE("torchrun's other variables: GROUP_WORLD_SIZE, TORCHELASTIC_RUN_ID, OMP_NUM_THREADS") {
  const Run r = run("env -u OMP_NUM_THREADS " + kLaunch +
                    " --nproc_per_node=1 --run_id=job7 /bin/sh -c "
                    "'echo "
                    "$GROUP_WORLD_SIZE/$TORCHELASTIC_RUN_ID/$TORCHELASTIC_RESTART_COUNT/$TORCHELASTIC_MAX_RESTARTS/"
                    "$OMP_NUM_THREADS'");
  INFO(r.output);
  REQUIRE_THAT(r.output, Catch::Contains("[rank 0] 1/job7/0/0/1"));
  const Run kept =
      run("OMP_NUM_THREADS=4 " + kLaunch + " --nproc_per_node=1 /bin/sh -c 'echo threads $OMP_NUM_THREADS'");
  REQUIRE_THAT(kept.output, Catch::Contains("[rank 0] threads 4"));
  const Run bad = run(kLaunch + " --tee 3 /bin/true");
  REQUIRE(bad.status == 2);
  REQUIRE_THAT(bad.output, Catch::Contains("give --log_dir too"));
}
