// The clock every wait of the distributed runtime measures its deadlines with: steady time,
// less the time this process spent stopped (SIGSTOP; SIGTSTP, Ctrl-Z in a terminal; a batch
// scheduler suspending a job) once it is continued (SIGCONT). A whole job stopped for ten
// minutes and continued (`fg`, `kill -CONT`) then finds every wait where it left it, rather
// than every deadline passed and every rank blaming another for a timeout.
//
//   watch_for_stops();                  // the rendezvous store and the launcher call it
//   Deadline d = Clock::now() + 5s;     // a stop of any length still leaves 5 s of waiting
//
// How a stop is seen: no thread of this process read the clock for over a second (a
// stopped process reads nothing), and a SIGCONT arrived after the last reading. That gap is
// taken off. A gap with no SIGCONT (a thread blocked in a slow system call, a long
// computation) counts in full, as it must. A rank stopped alone still holds the others up:
// their clocks run on, so they time out naming it (and the launcher ends a job whose rank
// stays stopped: --stopped_timeout). A program that handles SIGCONT itself keeps its handler,
// and the time it is stopped counts.
#pragma once

#include <chrono>

namespace engine::dist {

struct Clock {
  using duration = std::chrono::steady_clock::duration;
  using rep = duration::rep;
  using period = duration::period;
  using time_point = std::chrono::time_point<Clock>;
  static constexpr bool is_steady = true;
  static time_point now() noexcept;
};

// Installs the SIGCONT handler the clock needs (once per process; not over a handler the
// program installed itself).
void watch_for_stops();

// The time taken off so far: the time this process was seen stopped.
Clock::duration time_stopped();

}  // namespace engine::dist
