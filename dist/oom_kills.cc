#include "dist/oom_kills.h"

#include <fstream>
#include <sstream>
#include <vector>

namespace engine::dist {
namespace {

// The value after `key` on a line "key value" of `file` (memory.events, memory.oom_control
// and vmstat all look so), or -1.
int64_t read_counter(const std::string& file, const std::string& key) {
  std::ifstream in(file);
  for (std::string line; std::getline(in, line);) {
    std::istringstream words(line);
    std::string name;
    long long value = -1;
    if (words >> name >> value && name == key && value >= 0) return value;
  }
  return -1;
}

// This process's cgroup paths from /proc/self/cgroup ("ID:controllers:/path"): the v1
// memory hierarchy's in *v1, the v2 (unified) one's in *v2.
void cgroup_paths(const std::string& self_cgroup, std::string* v1, std::string* v2) {
  std::ifstream in(self_cgroup);
  for (std::string line; std::getline(in, line);) {
    const size_t a = line.find(':'), b = a == std::string::npos ? a : line.find(':', a + 1);
    if (b == std::string::npos) continue;
    const std::string controllers = line.substr(a + 1, b - a - 1), path = line.substr(b + 1);
    if (controllers.empty()) *v2 = path;
    std::istringstream list(controllers);
    for (std::string c; std::getline(list, c, ',');)
      if (c == "memory") *v1 = path;
  }
}

}  // namespace

OomKills read_oom_kills(const OomPaths& paths) {
  std::string v1 = "-", v2 = "-";
  cgroup_paths(paths.self_cgroup, &v1, &v2);
  // Each place a memory cgroup's counter may be: under its path, or at the mount's root
  // when the mount is the cgroup itself (a container without its own cgroup namespace).
  std::vector<std::string> files;
  if (v2 != "-")
    for (const std::string& dir : {paths.cgroup_root + v2, paths.cgroup_root + "/unified" + v2, paths.cgroup_root})
      files.push_back(dir + "/memory.events");
  if (v1 != "-")
    for (const std::string& dir : {paths.cgroup_root + "/memory" + v1, paths.cgroup_root + "/memory"})
      files.push_back(dir + "/memory.oom_control");
  for (const std::string& file : files)
    if (const int64_t n = read_counter(file, "oom_kill"); n >= 0) return {n, file + ", this memory cgroup's count"};
  if (const int64_t n = read_counter(paths.vmstat, "oom_kill"); n >= 0)
    return {n, paths.vmstat + ", the machine's count"};
  return {};
}

std::string oom_note(const OomKills& before, const OomKills& after) {
  if (before.count < 0 || after.count <= before.count || before.where != after.where) return "";
  return ", most likely by the kernel's out-of-memory killer: its count of OOM kills went from " +
         std::to_string(before.count) + " to " + std::to_string(after.count) + " since the ranks started (" +
         after.where +
         "; dmesg names the processes killed, which need not be the ones that asked for more). The job outgrew the "
         "memory of this machine, or its container's limit: use a smaller batch, fewer ranks on this machine "
         "(--nproc_per_node), or more memory";
}

}  // namespace engine::dist
