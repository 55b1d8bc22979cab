// What the cgroups this process runs in (a container, a systemd unit, a batch job) say
// about it: where their files are, and how many CPUs' worth of time their quotas allow.
// The launcher counts `--nproc_per_node=cpu` (and `auto` without a GPU) by the quota too:
// a container started with `docker run --cpus=2` on a 64-CPU host may run on all 64 CPUs
// (its affinity) but only for 2 CPUs' worth of time, and 64 ranks there would each get a
// thirty-second of a CPU.
//
//   const CpuQuota q = read_cpu_quota();   // q.cpus == 2, q.where names the file and value
//   for (const CgroupDir& d : cgroup_dirs(CgroupFiles{}, "memory")) ...   // oom_kills.cc
#pragma once

#include <string>
#include <vector>

namespace engine::dist {

// Where the files live; tests point these at a tree of their own.
struct CgroupFiles {
  std::string self_cgroup = "/proc/self/cgroup";  // this process's cgroups, "ID:controllers:/path" a line
  std::string root = "/sys/fs/cgroup";            // where cgroup file systems are mounted
};

// Where the files of this process's cgroup for `v1_controller` may be (v1: under
// root/<controller>), and of its unified (v2) cgroup (under root, or root/unified on a
// host that mounts both), most specific first.
struct CgroupDir {
  std::string dir;    // the cgroup's own folder
  std::string mount;  // the root of the mount it is in: the cgroup itself in a container that
                      // has no cgroup namespace of its own (`dir` then names a folder not there)
  bool v1 = false;    // a v1 hierarchy's (its files have v1's names)
};
std::vector<CgroupDir> cgroup_dirs(const CgroupFiles& files, const std::string& v1_controller);

struct CpuQuota {
  int cpus = 0;       // CPUs' worth of time allowed, rounded up; 0: no quota found
  std::string where;  // the file and its value, in words
};

// The smallest quota along this process's cgroup and its parents: cgroup v2 `cpu.max`
// ("200000 100000": 200 ms of CPU time each 100 ms, 2 CPUs; "max": none), v1
// `cpu.cfs_quota_us` over `cpu.cfs_period_us` (-1: none). Values that cannot be read or
// make no sense (a period of 0) are passed over.
CpuQuota read_cpu_quota(const CgroupFiles& files = CgroupFiles{});

}  // namespace engine::dist
