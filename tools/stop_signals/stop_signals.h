// The signals that ask a training program to stop, caught: the program saves where it is
// and ends at a step boundary, so that the same command with --resume loses no step,
// rather than dying mid-step wherever the signal found it. They are what schedulers and
// people send:
//
//   SIGTERM   a scheduler preempting the job, Slurm at its time limit, `timeout`, `kill`,
//             the launcher passing on its own
//   SIGINT    Ctrl-C
//   SIGHUP    the ssh session that started the job dropped
//   SIGUSR1,  the warning a batch scheduler sends ahead of the time limit where asked to
//   SIGUSR2   (Slurm's --signal=USR1@90; submitit uses SIGUSR2)
//
//   engine::catch_stop_signals();               // once, at the start
//   for (...) {
//     step();
//     if (engine::stop_signal_caught()) { save(); return engine::kStoppedOnRequest; }
//   }
//
// The first signal is the request. The same request often arrives more than once: a
// scheduler signals every process of the job, and the launcher passes its own signal on to
// its ranks. So later signals change nothing, except a second SIGINT: Ctrl-C pressed again
// ends the process at once. A distributed program asks dist::stop_requested() instead, so
// that every rank stops after the same step.
#pragma once

#include <string>

namespace engine {

// The exit status of a program that stopped on request: 128 + SIGTERM, as if the signal had
// ended it (a launcher must not take the job for finished, and restarts it if told to).
constexpr int kStoppedOnRequest = 143;

// Installs the handlers, where the program has not set one itself and was not started
// ignoring the signal (nohup, a shell's background job: left as they are).
void catch_stop_signals();

// Unblocks `sig` in the calling thread (and so in the threads it starts after). A blocked
// signal stays blocked across exec: a program started by a thread of a Python program, from
// a signal handler or by a supervisor that blocks signals would otherwise never run the
// handler it installs (and a launcher never hears its ranks exit).
void unblock_signal(int sig);

// True when `sig` still has its default action: the program has set no handler of its own,
// and was not started ignoring it.
bool has_default_action(int sig);

// Whether a stop signal has arrived (async-signal-safe to read: a flag).
bool stop_signal_caught();

// The first stop signal, by name ("SIGTERM", "SIGINT (Ctrl-C)", "SIGHUP", "SIGUSR1",
// "SIGUSR2"), or "" when none has arrived.
std::string stop_signal();

}  // namespace engine
