// The launcher's watch over one attempt's ranks (dist/launch.cc starts them): every line
// they print relayed with their rank, their exits reaped in the order they happen, the
// first failure named (a rank killed by a signal over the peers that failed because of
// it, a stopped rank over the one that timed out waiting for it), and the rest stopped.
//
//   engine::dist::launcher::install_reaper();            // once, before the first fork
//   std::vector<Child> children = ...;                   // forked, their pipes non-blocking
//   const OomKills oom = read_oom_kills();               // before the first fork of an attempt
//   const Outcome out = watch(children, 30, g_signals, oom);  // returns when all have ended
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "dist/launch_notice.h"
#include "dist/oom_kills.h"
#include "dist/stop_clock.h"

namespace engine::dist::launcher {

// One of a rank's output streams (stdout or stderr), as the launcher passes it on.
struct Stream {
  explicit Stream(const char* stream_name) : name(stream_name) {}
  const char* name;     // "stdout" or "stderr"
  int fd = -1;          // the read end of its pipe
  std::string buf;      // a partial last line waiting for its newline
  FILE* log = nullptr;  // --log_dir: where it is also (or only) written
  bool console = true;  // whether it is shown on the launcher's own stream
};

// One rank of this node, as the launcher started it.
struct Child {
  int rank = 0, local_rank = 0;
  pid_t pid = -1;
  Stream out{"stdout"}, err{"stderr"};
  bool running = true;
  int status = 0;
  Clock::time_point stopped_since{};  // when it was first seen stopped
  Clock::time_point err_at{};         // when its stderr last had output
  Clock::time_point reaped_at{};
  RankNotices notices;  // what it said of init_process_group (launch_notice.h)
  // For a rank that left without joining: whether telling the other machines' ranks about
  // it is over (TellWaiting: they were told, or no store answered in time).
  bool tell_done = false;
};

// How an attempt ended.
struct Outcome {
  int exit_code = 0;        // 0: every rank succeeded
  std::string reason;       // the first failure, in words
  bool signalled = false;   // the launcher itself was told to stop: no restart
  std::string ranks_ended;  // when signalled: how the ranks ended, in words
};

// The stop signals the launcher was sent, as its handler records them.
struct LauncherSignals {
  volatile sig_atomic_t first = 0;       // the first (0: none yet)
  volatile sig_atomic_t interrupts = 0;  // SIGINTs: at the second Ctrl-C the ranks are killed at once
};

// Reaps children in a SIGCHLD handler from now on, in the order they exit; children the
// launcher already has are not taken for what a rank left. Throws Error when its pipe
// cannot be made.
void install_reaper();

// Relays the ranks' output and waits until every rank has ended. At the first failure
// the others get SIGTERM (SIGKILL 5 s later); a rank stopped (SIGSTOP, SIGTSTP) for
// stopped_timeout seconds (0: never) counts as failed. Once `signals` has a first signal
// (set by the launcher's own handler) every rank is passed it (SIGUSR1 and SIGUSR2 as they
// are, the others as SIGTERM), and has 30 s to save and end, or until a second SIGINT. A rank killed by SIGKILL while
// the out-of-memory kills counted since `oom_before` rose is said to be most likely the OOM killer's. Closes the
// children's pipes and logs.
//
// A rank that exits with status 0 without ever entering init_process_group, while another
// rank of this machine waits there, counts as failed (launch_notice.h). Ranks on other
// machines are out of sight: `tell_waiting`, where given, leaves its words where every rank
// waiting in init_process_group reads them (rank 0's store), unless the store shows that the
// rank did join (its notices lost: a rank in a container that was not given them).
enum class Told { kYes, kNoStoreYet, kItJoined };
using TellWaiting = std::function<Told(int rank, const std::string& why)>;
Outcome watch(std::vector<Child>& children, int stopped_timeout, const LauncherSignals& signals,
              const OomKills& oom_before, const TellWaiting& tell_waiting = {});

}  // namespace engine::dist::launcher
