#include "dist/process_state.h"

#include <fstream>

namespace engine::dist {

char process_state(pid_t pid) {
  if (pid <= 0) return '?';
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return '?';
  const size_t close = line.rfind(')');  // the name, in parentheses, may hold spaces and ')'
  return close != std::string::npos && close + 2 < line.size() ? line[close + 2] : '?';
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
