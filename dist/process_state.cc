#include "dist/process_state.h"

#include <dirent.h>

#include <cstdlib>
#include <fstream>

namespace engine::dist {

namespace {

// /proc/PID/stat: "PID (NAME) STATE PPID ...". The name, in parentheses, may hold spaces
// and ')'. False when there is no such process.
bool read_stat(pid_t pid, std::string* name, char* state, pid_t* parent) {
  if (pid <= 0) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return false;
  const size_t open = line.find('('), close = line.rfind(')');
  if (open == std::string::npos || close == std::string::npos || close < open || close + 2 >= line.size()) return false;
  *name = line.substr(open + 1, close - open - 1);
  *state = line[close + 2];
  *parent = pid_t(std::strtol(line.c_str() + close + 3, nullptr, 10));
  return true;
}

}  // namespace

char process_state(pid_t pid) {
  std::string name;
  char state = '?';
  pid_t parent = 0;
  return read_stat(pid, &name, &state, &parent) ? state : '?';
}

std::vector<ChildProcess> live_children(pid_t parent) {
  std::vector<ChildProcess> found;
  DIR* d = ::opendir("/proc");
  if (!d) return found;
  while (const dirent* e = ::readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (pid <= 0 || *end) continue;
    std::string name;
    char state = '?';
    pid_t ppid = 0;
    if (read_stat(pid_t(pid), &name, &state, &ppid) && ppid == parent && state != 'Z' && state != 'X')
      found.push_back({pid_t(pid), name});
  }
  ::closedir(d);
  return found;
}

std::string state_words(pid_t pid) {
  const std::string p = std::to_string(pid);
  switch (process_state(pid)) {
    case 'T': return ", which is stopped (pid " + p + ": SIGSTOP, or Ctrl-Z; kill -CONT " + p + " continues it)";
    case 't': return ", which is stopped in a debugger (pid " + p + ")";
    case 'D':
      return ", which is in uninterruptible sleep (pid " + p + "), usually waiting for a disk or a network file system";
    default: return "";
  }
}

}  // namespace engine::dist
