// How many processes the kernel's out-of-memory killer has ended, as far as this process
// can see: what tells a rank killed by the OOM killer from one killed by a person or a
// program. Both die of SIGKILL, and "killed by signal 9" alone leaves a learner to guess;
// the kernel counts its kills per memory cgroup (a container, a systemd unit, a job), and
// the launcher compares the count before its ranks start with the count when one dies.
//
//   const OomKills before = read_oom_kills();  // before the ranks start
//   ...                                         // a rank dies of SIGKILL
//   std::string why = oom_note(before, read_oom_kills());  // "" unless the count rose
#pragma once

#include <cstdint>
#include <string>

#include "dist/cgroups.h"

namespace engine::dist {

struct OomKills {
  int64_t count = -1;  // -1: no counter could be read
  std::string where;   // the counter: a file and what it covers
};

// Where the counters live; tests point these at a tree of their own.
struct OomPaths {
  CgroupFiles cgroups;                  // this process's cgroups, and where they are mounted
  std::string vmstat = "/proc/vmstat";  // the machine-wide count
};

// The count of this process's memory cgroup (cgroup v2 `memory.events`, v1
// `memory.oom_control`), which its children share unless moved; else the machine's
// (`/proc/vmstat`), which also counts kills in other containers.
OomKills read_oom_kills(const OomPaths& paths = OomPaths{});

// Words for a SIGKILL seen between `before` and `after`: "" when the count did not rise or
// could not be read, else what ran out and what to change.
std::string oom_note(const OomKills& before, const OomKills& after);

}  // namespace engine::dist
