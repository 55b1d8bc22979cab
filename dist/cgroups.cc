#include "dist/cgroups.h"

#include <sys/stat.h>

#include <charconv>
#include <fstream>
#include <sstream>

namespace engine::dist {
namespace {

bool is_dir(const std::string& path) {
  struct stat st {};
  return stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

// This process's cgroup paths from /proc/self/cgroup: the v1 hierarchy's that holds
// `controller` in *v1, the unified (v2) one's in *v2; "" where there is none.
void own_paths(const std::string& self_cgroup, const std::string& controller, std::string* v1, std::string* v2) {
  std::ifstream in(self_cgroup);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1);
    std::string path = line.substr(b + 1);
    if (path.empty() || path[0] != '/') continue;
    // "/../x": a cgroup outside this process's cgroup namespace, which cannot be reached
    // from here; the namespace's root is what the mount shows.
    if (path.find("/..") != std::string::npos) path = "/";
    if (controllers.empty()) *v2 = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == controller) *v1 = path;
  }
}

// A whole number from the start of `text` (after spaces), or -1.
long long leading_number(const std::string& text, size_t* end = nullptr) {
  size_t i = text.find_first_not_of(" \t");
  if (i == std::string::npos) return -1;
  long long v = -1;
  const auto [p, ec] = std::from_chars(text.data() + i, text.data() + text.size(), v);
  if (ec != std::errc() || v < 0) return -1;
  if (end) *end = size_t(p - text.data());
  return v;
}

std::string first_line(const std::string& file) {
  std::ifstream in(file);
  std::string line;
  std::getline(in, line);
  return line;
}

// CPUs' worth of time from a quota of `quota` us each `period` us, rounded up; 0 for none
// or nonsense.
int cpus_of(long long quota, long long period) {
  if (quota <= 0 || period <= 0) return 0;
  const long long cpus = (quota + period - 1) / period;
  return cpus > 1 << 20 ? 0 : int(cpus);
}

// The quota set in one cgroup's folder: v1's pair of files, or v2's cpu.max.
CpuQuota quota_in(const std::string& dir, bool v1) {
  if (!v1) {
    const std::string max = first_line(dir + "/cpu.max");
    size_t at = 0;
    const long long quota = leading_number(max, &at);
    if (const int n = cpus_of(quota, leading_number(max.substr(at))))
      return {n, dir + "/cpu.max holds \"" + max + "\""};
    return {};
  }
  const std::string quota = first_line(dir + "/cpu.cfs_quota_us"), period = first_line(dir + "/cpu.cfs_period_us");
  if (const int n = cpus_of(leading_number(quota), leading_number(period)))
    return {n, dir + "/cpu.cfs_quota_us holds " + quota + " and cpu.cfs_period_us " + period};
  return {};
}

}  // namespace

std::vector<CgroupDir> cgroup_dirs(const CgroupFiles& files, const std::string& v1_controller) {
  std::string v1, v2;
  own_paths(files.self_cgroup, v1_controller, &v1, &v2);
  std::vector<CgroupDir> dirs;
  const auto add = [&](const std::string& mount, const std::string& path, bool is_v1) {
    if (!path.empty()) dirs.push_back({mount + (path == "/" ? "" : path), mount, is_v1});
  };
  add(files.root, v2, false);
  add(files.root + "/unified", v2, false);
  add(files.root + "/" + v1_controller, v1, true);
  return dirs;
}

CpuQuota read_cpu_quota(const CgroupFiles& files) {
  CpuQuota best;
  for (const CgroupDir& d : cgroup_dirs(files, "cpu")) {
    // From this process's cgroup up to the mount's root (or the root alone, where the
    // cgroup's own folder is not there): a parent's quota binds its children too.
    std::string dir = is_dir(d.dir) ? d.dir : d.mount;
    while (true) {
      const CpuQuota q = quota_in(dir, d.v1);
      if (q.cpus > 0 && (best.cpus == 0 || q.cpus < best.cpus)) best = q;
      if (dir.size() <= d.mount.size()) break;
      dir = dir.substr(0, dir.rfind('/'));
    }
  }
  return best;
}

}  // namespace engine::dist
