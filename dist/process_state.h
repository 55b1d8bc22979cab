// What Linux says a process on this machine is doing (/proc/PID/stat), for the waits that
// watch their peers by pid: a peer that died, or one that is alive but will not answer.
//
//   if (process_state(pid) == 'T') ...            // stopped by a signal
//   "waiting for rank 1" + state_words(pid)       // ", which is stopped by a signal (...)"
//   for (const auto& c : live_children(getpid())) ...  // what this process's children are
#pragma once

#include <sys/types.h>

#include <string>
#include <vector>

namespace engine::dist {

// The state letter: R running, S sleeping, D in uninterruptible sleep, T stopped by a signal
// (SIGSTOP, SIGTSTP), t stopped by a debugger, Z exited and not yet reaped, X dead; '?' when
// there is no such process (or /proc cannot be read).
char process_state(pid_t pid);

// For the states that explain a peer's silence (T, t, D): ", which is ..." with what to do;
// "" for the others.
std::string state_words(pid_t pid);

// The processes whose parent is `parent` and that have not exited (zombies left out), each
// with its command name ("sleep"), from /proc.
struct ChildProcess {
  pid_t pid;
  std::string name;
};
std::vector<ChildProcess> live_children(pid_t parent);

}  // namespace engine::dist
