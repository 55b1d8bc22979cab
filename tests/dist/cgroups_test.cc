// The CPU quota the launcher counts --nproc_per_node=cpu by (dist/cgroups.h), on trees laid
// out as cgroup v2, cgroup v1 and a container's mount are; and, where this host lets a test
// make a cgroup, the launcher inside one.
#include "dist/cgroups.h"

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iostream>
#include <string>

#include "catch2/catch.hpp"
#include "tests/dist/run_command.h"
#include "tests/testing/tmp_path.h"

using engine::dist::CgroupFiles;
using engine::dist::CpuQuota;
using engine::dist::read_cpu_quota;

namespace {
// A fresh tree for one case: /proc/self/cgroup and /sys/fs/cgroup inside it.
struct Tree : engine::testing::FileTree {
  explicit Tree(const std::string& name) : FileTree("cgroups-" + name), files{root + "/self_cgroup", root + "/cgroup"} {
    std::filesystem::create_directories(root + "/cgroup");
  }
  CgroupFiles files;
};
}  // namespace

TEST_CASE("cgroup v2: cpu.max, rounded up, the smallest along the cgroup and its parents") {
  Tree t("v2");
  t.write("/self_cgroup", "0::/job/ranks\n");
  t.write("/cgroup/cpu.max", "max 100000\n");
  t.write("/cgroup/job/cpu.max", "max 100000\n");
  t.write("/cgroup/job/ranks/cpu.max", "150000 100000\n");  // 1.5 CPUs: 2 ranks
  CpuQuota q = read_cpu_quota(t.files);
  CHECK(q.cpus == 2);
  CHECK(q.where == t.root + "/cgroup/job/ranks/cpu.max holds \"150000 100000\"");
  t.write("/cgroup/job/cpu.max", "100000 100000\n");  // the parent's binds the child
  CHECK(read_cpu_quota(t.files).cpus == 1);
}

TEST_CASE("cgroup v1: cpu.cfs_quota_us over cpu.cfs_period_us; -1 is no quota") {
  Tree t("v1");
  t.write("/self_cgroup", "4:cpu,cpuacct:/slurm/job7\n1:memory:/x\n0::/\n");
  t.write("/cgroup/cpu/slurm/job7/cpu.cfs_quota_us", "-1\n");
  t.write("/cgroup/cpu/slurm/job7/cpu.cfs_period_us", "100000\n");
  CHECK(read_cpu_quota(t.files).cpus == 0);
  t.write("/cgroup/cpu/slurm/cpu.cfs_quota_us", "250000\n");
  t.write("/cgroup/cpu/slurm/cpu.cfs_period_us", "100000\n");
  const CpuQuota q = read_cpu_quota(t.files);
  CHECK(q.cpus == 3);
  CHECK(q.where == t.root + "/cgroup/cpu/slurm/cpu.cfs_quota_us holds 250000 and cpu.cfs_period_us 100000");
}

TEST_CASE("a container whose cgroup is the mount's root (no cgroup namespace): the root's quota") {
  Tree t("container");
  t.write("/self_cgroup", "0::/kubepods/pod1/abc\n");  // the host's path, not under this mount
  t.write("/cgroup/cpu.max", "400000 100000\n");
  CHECK(read_cpu_quota(t.files).cpus == 4);
  t.write("/self_cgroup", "0::/../../elsewhere\n");  // outside this cgroup namespace
  CHECK(read_cpu_quota(t.files).cpus == 4);
}

TEST_CASE("values that make no sense are passed over; nothing to read is no quota") {
  Tree t("bad");
  t.write("/self_cgroup", "0::/a\n");
  for (const std::string bad :
       {"banana 100000", "100000 0", "0 100000", "-5 100000", "100000", "", "99999999999999999999 1", "1 -1", "max"}) {
    t.write("/cgroup/a/cpu.max", bad + "\n");
    INFO("cpu.max holds \"" << bad << "\"");
    CHECK(read_cpu_quota(t.files).cpus == 0);
  }
  t.write("/cgroup/a/cpu.max", "50 100000\n");  // a sliver of a CPU is one rank's worth
  CHECK(read_cpu_quota(t.files).cpus == 1);
  Tree none("none");
  CHECK(read_cpu_quota(none.files).cpus == 0);  // no /proc/self/cgroup at all
}

TEST_CASE("the launcher in a cgroup with a quota of one CPU: --nproc_per_node=cpu starts one rank, and says why") {
  using engine::testing::run;
  const std::string mount = "/sys/fs/cgroup/cpu";
  const std::string group = mount + "/engine_quota_test_" + std::to_string(getpid());
  std::error_code ec;
  if (!std::filesystem::create_directory(group, ec) || !(std::ofstream(group + "/cpu.cfs_quota_us") << "100000")) {
    std::cout << "SKIPPED: no cgroup v1 cpu hierarchy to make a cgroup in here (" << mount << ")" << std::endl;
    WARN("SKIPPED: no cgroup v1 cpu hierarchy to make a cgroup in here");
    std::filesystem::remove(group, ec);
    return;
  }
  // The shell moves itself into the cgroup; the launcher it becomes counts there.
  const auto r = run("sh -c 'echo $$ > " + group + "/cgroup.procs && exec taskset -c 0,1 " + engine::testing::kLaunch +
                     " --nproc_per_node=cpu /bin/true'");
  std::filesystem::remove(group, ec);
  INFO(r.output);
  CHECK(r.status == 0);
  CHECK_THAT(r.output,
             Catch::Contains("launch: --nproc_per_node=cpu: 1 rank, one per CPU this launcher may run on (1 of the 2 "
                             "CPUs it may run on: its cgroup's CPU quota allows 1 CPU's worth of time (" +
                             group + "/cpu.cfs_quota_us holds 100000 and cpu.cfs_period_us 100000))"));
  CHECK(!ec);  // the cgroup was removed (its last process has exited)
}
