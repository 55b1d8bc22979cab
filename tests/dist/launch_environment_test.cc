// The launcher and the runtime under a host's limits: containers that share a host name,
// a /dev/shm too small for shared memory, too few file descriptors or processes to start
// every rank, or too few for every rank's connections, a memory limit a rank outgrows. Not
// sandboxed: it mounts, enters namespaces, makes memory cgroups and runs programs as a user
// without privileges.
#include <stdlib.h>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>
#include <thread>
#include <vector>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/held_port.h"

using namespace engine::testing;  // run, Run, runfile, kLaunch, kProbe

TEST_CASE("containers on one host, with their own pids and /dev/shm, are separate machines") {
  // Two launchers, each in its own pid and mount namespace with its own /dev/shm, but with
  // the host's name and boot id (as Kubernetes pods with hostNetwork have): two machines of
  // 2 ranks. Taken for one machine, the ranks tried to share memory through two different
  // /dev/shm and read each other's pids as dead: "rank 0 (pid N) died while the ranks were
  // setting up shared memory".
  const std::string box = "unshare --pid --fork --mount --mount-proc sh -c 'mount -t tmpfs tmpfs /dev/shm && ";
  if (run(box + "echo ready'").output != "ready\n") {
    std::cout << "SKIPPED: containers on one host (unshare --pid --mount, or mounting /dev/shm, is not allowed here)"
              << std::endl;
    WARN("SKIPPED: unshare --pid --mount is not allowed here");
    return;
  }
  // A port held for this test (not a fixed number another run beside it may hold).
  const std::string job =
      " --nnodes=2 --nproc_per_node=2 --master_port=" + std::to_string(engine::testing::held_port()) +
      " --job_token=boxes ";
  Run node0;
  std::thread first([&] {
    node0 = run("ENGINE_DIST_TIMEOUT=20 " + box + "exec " + kLaunch + job + "--node_rank=0 " + kProbe + "'");
  });
  const Run node1 = run("ENGINE_DIST_TIMEOUT=20 " + box + "exec " + kLaunch + job + "--node_rank=1 " + kProbe + "'");
  first.join();
  INFO(node0.output << "\n---\n" << node1.output);
  REQUIRE(node0.status == 0);
  REQUIRE(node1.status == 0);
  for (int r = 0; r < 4; ++r)
    REQUIRE_THAT(node0.output + node1.output, Catch::Contains("[rank " + std::to_string(r) + "] sum 6\n[rank " +
                                                              std::to_string(r) + "] all_reduce ran hierarchical"));
}

TEST_CASE("a /dev/shm too small for shared memory: a warning and the slower path, not a bus error") {
  // /dev/shm is a tmpfs: a page it has no room for used to be a SIGBUS at the first write
  // (Docker gives a container 64 MB). 64 KiB: not even the staging buffers fit (4 MiB for 2
  // ranks); 6 MiB: they do, a 16 MB shared buffer (DDP's buckets) does not.
  const std::string small = "unshare --mount sh -c 'mount -t tmpfs -o size=";
  if (run(small + "64k tmpfs /dev/shm && echo ready'").output != "ready\n") {
    std::cout << "SKIPPED: a small /dev/shm (unshare --mount, or mounting a tmpfs, is not allowed here)" << std::endl;
    WARN("SKIPPED: unshare --mount is not allowed here");
    return;
  }
  const Run none = run(small + "64k tmpfs /dev/shm && exec " + kLaunch + " --nproc_per_node=2 " + kProbe + "'");
  INFO(none.output);
  REQUIRE(none.status == 0);
  REQUIRE_THAT(none.output, Catch::Contains("[rank 0] [dist] warning: rank 0 cannot reserve 4.0 MiB of shared "
                                            "memory (No space left on device; /dev/shm has") &&
                                Catch::Contains("free of 64 KiB): all_reduce among this machine's ranks takes the "
                                                "TCP ring. Enlarge /dev/shm"));
  REQUIRE_THAT(none.output, Catch::Contains("[rank 1] sum 1\n[rank 1] all_reduce ran ring"));
  // A /dev/shm that cannot be written at all: the same path, and advice that fits.
  const Run read_only = run("unshare --mount sh -c 'mount -t tmpfs -o ro tmpfs /dev/shm && exec " + kLaunch +
                            " --nproc_per_node=2 " + kProbe + "'");
  INFO(read_only.output);
  REQUIRE(read_only.status == 0);
  REQUIRE_THAT(read_only.output, Catch::Contains("(Read-only file system; /dev/shm has") &&
                                     Catch::Contains("takes the TCP ring. Make /dev/shm a writable tmpfs, or set "
                                                     "ENGINE_SHM=0"));
  REQUIRE_THAT(read_only.output, Catch::Contains("[rank 0] sum 1\n[rank 0] all_reduce ran ring"));
  const Run buffers = run("PROBE_SHARED_FLOATS=2000000 " + small + "6m tmpfs /dev/shm && exec " + kLaunch +
                          " --nproc_per_node=2 " + kProbe + "'");
  INFO(buffers.output);
  REQUIRE(buffers.status == 0);
  REQUIRE_THAT(buffers.output, Catch::Contains("[rank 0] [dist] warning: rank 0 cannot reserve a shared buffer of "
                                               "15.3 MiB (No space left on device; /dev/shm has"));
  for (int r = 0; r < 2; ++r)
    REQUIRE_THAT(buffers.output, Catch::Contains("[rank " + std::to_string(r) + "] all_reduce ran shm\n[rank " +
                                                 std::to_string(r) + "] shared buffer sum right"));
}

TEST_CASE("a rank that cannot be started: the started ones are stopped and the limit is named") {
  // Out of file descriptors: the launcher said only "pipe failed" under its usage text.
  // (CHECK: the case below runs whatever this one finds.)
  const Run files =
      run("bash -c 'ulimit -n 16; PROBE_HOLD_MS=30000 exec " + kLaunch + " --nproc_per_node=16 " + kProbe + "'");
  INFO(files.output);
  CHECK(files.status == 1);
  CHECK_THAT(files.output, Catch::Contains("launch: cannot start rank ") &&
                               Catch::Contains(": pipe failed: Too many open files (this process may open 16 files, "
                                               "ulimit -n;") &&
                               Catch::Contains("the ranks already started were stopped"));
  CHECK_THAT(files.output, !Catch::Contains("usage:"));
  CHECK(files.seconds < 15);  // not the 30 s the started ranks would hold
  // Out of processes: fork's -1 was kept as a rank's pid, and stopping "it" was kill(-1),
  // a signal to every process the launcher could signal, then a wait for it forever.
  // RLIMIT_NPROC binds only a user without privileges, and counts every process of that
  // user: a user id no other process has (not nobody, whom other tests become too), with
  // copies of the programs.
  char dir[] = "/tmp/launch_nproc.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const std::string d = dir;
  const bool copied = run("chmod 755 " + d + " && cp " + kLaunch + " " + kProbe + " " + d + "/").status == 0;
  const std::string uid = std::to_string(200000 + getpid() % 100000);
  const std::string as_stranger = "setpriv --reuid=" + uid + " --regid=" + uid + " --clear-groups --inh-caps=-all ";
  if (!copied || run(as_stranger + "true").status != 0) {
    std::cout << "SKIPPED: fork failure (setpriv to another user is not available here)" << std::endl;
    WARN("SKIPPED: setpriv to another user is not available here");
  } else {
    const Run procs = run("timeout -s KILL 30 " + as_stranger + "bash -c 'ulimit -u 3; PROBE_HOLD_MS=30000 exec " + d +
                          "/launch --nproc_per_node=4 " + d + "/launch_probe'");
    INFO(procs.output);
    REQUIRE(procs.status == 1);
    REQUIRE_THAT(procs.output, Catch::Contains("launch: cannot start rank ") &&
                                   Catch::Contains(": fork failed: Resource temporarily unavailable (the limit on "
                                                   "processes: ulimit -u, or the container's pids.max); the ranks "
                                                   "already started were stopped"));
    REQUIRE(procs.seconds < 15);
    // Out of threads inside the ranks (the store's client threads, the collective worker):
    // a thread the store's accept loop could not start aborted rank 0 ("terminate called
    // after throwing std::system_error"); elsewhere the error said only "Resource
    // temporarily unavailable". Each limit below runs out at another of them.
    // (Under AddressSanitizer, its leak check at exit needs a thread of its own, which these
    // limits deny, and it aborts: it is turned off for these runs.)
    for (int limit : {4, 5, 6}) {
      const Run threads =
          run("ASAN_OPTIONS=${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0 timeout -s KILL 30 " + as_stranger +
              "bash -c 'ulimit -u " + std::to_string(limit) + "; ENGINE_DIST_TIMEOUT=5 exec " + d +
              "/launch --nproc_per_node=2 " + d + "/launch_probe'");
      INFO("ulimit -u " << limit << "\n" << threads.output);
      CHECK(threads.status == 1);
      CHECK_THAT(threads.output, Catch::Contains("thread: Resource temporarily unavailable (the limit on processes "
                                                 "and threads: ulimit -u, or the container's pids.max; or memory "
                                                 "for its 8 MiB stack)"));
      CHECK_THAT(threads.output, !Catch::Contains("terminate called"));
    }
  }
  run("rm -rf " + d);
}

TEST_CASE("a stack limit larger than the machine's memory (ulimit -s) leaves the ranks' threads their usual stacks") {
  // A thread's stack is the stack limit unless told otherwise, reserved whole: at 200 GiB
  // the store's thread could not start, and rank 0 blamed `ulimit -u` for it.
  const Run r =
      run("timeout -s KILL 30 bash -c 'ulimit -s 209715200 && exec " + kLaunch + " --nproc_per_node=2 " + kProbe + "'");
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output, Catch::Contains("[rank 1] sum 1"));
}

TEST_CASE("an address space too small for the launcher (ulimit -v): it says so in a line, never aborts") {
#ifdef __SANITIZE_ADDRESS__
  std::cout << "SKIPPED: AddressSanitizer reserves terabytes of address space, so no program of this build starts "
               "under ulimit -v"
            << std::endl;
  WARN("SKIPPED: no program of an AddressSanitizer build starts under ulimit -v");
  return;
#endif
  // Upwards from a limit the dynamic loader refuses to one under which the launcher starts
  // 1024 ranks: each limit between must end in one line that says why, not an abort (at
  // some limits here a std::bad_alloc ended it with "terminate called", status 134).
  int out_of_memory = 0;
  for (int kb = 3000; kb <= 20000; kb += 200) {
    const Run r =
        run("bash -c 'ulimit -v " + std::to_string(kb) + " && exec " + kLaunch + " --nproc_per_node=1024 /bin/true'");
    if (r.output.find("error while loading shared libraries") != std::string::npos) continue;  // before main
    INFO("ulimit -v " << kb << "\n" << r.output);
    REQUIRE(r.status != -1);
    REQUIRE_THAT(r.output, !Catch::Contains("terminate called"));
    if (r.status == 0) break;
    REQUIRE(r.status == 1);
    REQUIRE_THAT(r.output, Catch::StartsWith("launch: "));
    out_of_memory += r.output.find("out of memory in the launcher itself") != std::string::npos;
  }
  std::cout << "limits at which the launcher ran out of memory and said so: " << out_of_memory << std::endl;
}

TEST_CASE("more ranks than the open-file limit allows: raised where it can be, named where it cannot") {
  // Every rank keeps a connection to each other rank, and rank 0 one from each rank to the
  // store it serves. Past `ulimit -n`, rank 0 spun in accept() until the timeout (300 s by
  // default), then blamed the ranks it had not accepted.
  const Run hard = run("bash -c 'ulimit -Hn'");
  if (hard.output != "unlimited\n" && std::atol(hard.output.c_str()) < 1024) {
    std::cout << "SKIPPED: the open-file limits (the hard limit here is " << hard.output << ")" << std::endl;
    WARN("SKIPPED: the hard open-file limit is below 1024 here");
    return;
  }
  // A rank inherited the launcher's pipes to every rank started before it, and its log
  // files: rank k of 6 started with 4 k more files open than rank 0.
  char dir[] = "/tmp/launch_files.XXXXXX";
  REQUIRE(mkdtemp(dir) != nullptr);
  const Run counted = run("PROBE_COUNT_FILES=1 " + kLaunch + " --nproc_per_node=6 --log_dir=" + std::string(dir) +
                          " --tee=3 " + kProbe);
  run("rm -rf " + std::string(dir));
  INFO(counted.output);
  REQUIRE(counted.status == 0);
  std::string first;
  for (int r = 0; r < 6; ++r) {
    const std::string tag = "[rank " + std::to_string(r) + "] open files at start: ";
    const size_t at = counted.output.find(tag);
    REQUIRE(at != std::string::npos);
    const std::string count = counted.output.substr(at + tag.size(), counted.output.find('\n', at) - at - tag.size());
    if (r == 0) first = count;
    CHECK(count == first);
  }
  // A soft limit of 64 (the hard one above it), 40 ranks: rank 0 needs about 130 files, the
  // launcher 80. Both raise the soft limit, as far as the hard one allows.
  const Run raised = run("bash -c 'ulimit -Sn 64; exec " + kLaunch + " --nproc_per_node=40 " + kProbe + "'");
  INFO(raised.output);
  CHECK(raised.status == 0);
  CHECK_THAT(raised.output, Catch::Contains("[rank 0] sum 780") && Catch::Contains("[rank 39] sum 780"));
  // 60 ranks on 6 machines of 10: a launcher needs fewer than 64 files, rank 0 more for the
  // store's connections alone (which come before the mesh's).
  const std::string port = std::to_string(engine::testing::held_port());
  const std::string six =
      " --nnodes=6 --nproc_per_node=10 --master_addr=127.0.0.1 --master_port=" + port + " --job_token=files ";
  std::vector<Run> machines(6);
  std::vector<std::thread> started;
  for (int m = 0; m < 6; ++m)
    started.emplace_back([&, m] {
      machines[size_t(m)] = run("bash -c 'ulimit -Sn 64; ENGINE_DIST_TIMEOUT=60 exec " + kLaunch + six +
                                "--node_rank=" + std::to_string(m) + " " + kProbe + "'");
    });
  for (auto& t : started) t.join();
  for (int m = 0; m < 6; ++m) {
    INFO("machine " << m << "\n" << machines[size_t(m)].output);
    CHECK(machines[size_t(m)].status == 0);
    CHECK_THAT(machines[size_t(m)].output, Catch::Contains("[rank " + std::to_string(10 * m) + "] sum 1770"));
  }
  // A hard limit of 100, two machines of 30 ranks: every rank of both says what is needed.
  const std::string job =
      " --nnodes=2 --nproc_per_node=30 --master_addr=127.0.0.1 --master_port=" + port + " --job_token=files ";
  const std::string limited = "bash -c 'ulimit -n 100; ENGINE_DIST_TIMEOUT=60 exec " + kLaunch + job;
  Run node0;
  std::thread first_node([&] { node0 = run(limited + "--node_rank=0 " + kProbe + "'"); });
  const Run node1 = run(limited + "--node_rank=1 " + kProbe + "'");
  first_node.join();
  INFO(node0.output << "\n---\n" << node1.output);
  for (const Run* node : {static_cast<const Run*>(&node0), &node1}) {
    CHECK(node->status == 1);
    CHECK(node->seconds < 20);  // not the 60 s timeout
    CHECK_THAT(node->output, Catch::Contains("(a connection to each of 59 other ranks) needs about ") &&
                                 Catch::Contains("but this process may open 100 (ulimit -n) and cannot raise that "
                                                 "past its hard limit, 100: raise both (ulimit -n "));
  }
}

namespace {
// A memory cgroup below this process's own, limited to `bytes`, as a container's limit is;
// "" with the reason in *why when none can be made here (not root, no memory controller).
std::string make_memory_cgroup(long long bytes, std::string* why) {
  std::ifstream self("/proc/self/cgroup");
  std::string v1, v2;
  for (std::string line; std::getline(self, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    if (controllers.empty()) v2 = line.substr(b + 1);
    if (("," + controllers + ",").find(",memory,") != std::string::npos) v1 = line.substr(b + 1);
  }
  const std::string name = "/engine-oom-test-" + std::to_string(getpid());
  auto write = [](const std::string& file, const std::string& text) { return bool(std::ofstream(file) << text); };
  std::error_code ec;
  if (!v1.empty()) {  // cgroup v1: the memory hierarchy of its own
    const std::string dir = "/sys/fs/cgroup/memory" + v1 + name;
    if (std::filesystem::create_directory(dir, ec) && write(dir + "/memory.limit_in_bytes", std::to_string(bytes)))
      return dir;
    *why = "cannot make a memory cgroup at " + dir;
    return "";
  }
  const std::string parent = "/sys/fs/cgroup" + v2;
  std::ifstream enabled(parent + "/cgroup.subtree_control");
  const std::string list((std::istreambuf_iterator<char>(enabled)), std::istreambuf_iterator<char>());
  if (v2.empty() || (" " + list).find(" memory") == std::string::npos) {
    *why = "the memory controller is not enabled below this process's cgroup (" + parent + ")";
    return "";
  }
  const std::string dir = parent + name;
  if (std::filesystem::create_directory(dir, ec) && write(dir + "/memory.max", std::to_string(bytes))) {
    write(dir + "/memory.swap.max", "0");  // none of it may go to swap instead
    return dir;
  }
  *why = "cannot make a memory cgroup at " + dir;
  return "";
}
}  // namespace

TEST_CASE("a rank the out-of-memory killer ends is said to be one, and one killed by hand is not") {
  // Both die of SIGKILL, and "killed by signal 9" left a learner to guess which. The
  // launcher compares its memory cgroup's count of OOM kills before and after.
  std::string why;
  const std::string cgroup = make_memory_cgroup(512ll << 20, &why);
  if (cgroup.empty()) {
    std::cout << "SKIPPED: a memory limit for the launcher (" << why << ")" << std::endl;
    WARN("SKIPPED: " + why);
    return;
  }
  const std::string enter =
      "sh -c 'echo $$ > " + cgroup + "/cgroup.procs && exec " + kLaunch + " --nproc_per_node=2 " + kProbe + "'";
  const Run oom = run("PROBE_ALLOCATE_RANK=1 " + enter);
  const Run by_hand = run("PROBE_KILL_RANK=1 " + enter);
  for (int i = 0; i < 50 && ::rmdir(cgroup.c_str()) != 0; ++i)  // empty once its processes are reaped
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  INFO(oom.output << "\n---\n" << by_hand.output);
  CHECK(oom.status == 128 + 9);
  // The killer picks the process with the most memory, not always the one asking for more
  // (under ASan, rank 0 and rank 1 were both killed, rank 0 first): any rank may be named.
  CHECK_THAT(oom.output, Catch::Contains("launch: rank ") &&
                             Catch::Contains("was killed by signal 9 (Killed), most likely by the kernel's "
                                             "out-of-memory killer: its count of OOM kills went from 0 to ") &&
                             Catch::Contains("use a smaller batch, fewer ranks on this machine"));
  CHECK(by_hand.status == 128 + 9);
  CHECK_THAT(by_hand.output, Catch::Contains("was killed by signal 9 (Killed); the other ranks were stopped"));
  CHECK_THAT(by_hand.output, !Catch::Contains("out-of-memory"));
}
