// A job asked to stop: SIGTERM (a scheduler preempting it, Slurm at its time limit, the
// launcher passing on its own SIGTERM, SIGINT or SIGHUP), SIGINT (Ctrl-C) or SIGHUP. A
// training loop that asks stop_requested() after every step saves its state and ends at a
// step boundary every rank agrees on, so that the same command with --resume loses no step,
// rather than every rank dying mid-step wherever the signal found it.
//
//   dist::catch_stop_signals();                 // once, after init_process_group
//   for (...) {
//     step();
//     if (dist::stop_requested()) { save_state(); return dist::kStoppedOnRequest; }
//   }
//
// stop_requested() is a collective (every rank's flag, all-reduced with MAX: one int on
// the wire): the signal reaches each rank at its own moment, and all must stop after the
// same step. A second signal of a kind ends the process at once (its default action is put
// back after the first), as a second Ctrl-C should.
#pragma once

#include <string>

#include "tensor/device.h"

namespace engine::dist {

// The exit status of a program that stopped on request: 128 + SIGTERM, as if the signal had
// ended it (a launcher must not take the job for finished, and restarts it if told to).
constexpr int kStoppedOnRequest = 143;

// Installs the handlers for SIGTERM, SIGINT and SIGHUP (not over handlers the program set).
void catch_stop_signals();

// The signal that asked this process to stop, by name ("SIGTERM", "SIGINT (Ctrl-C)",
// "SIGHUP"), or "" when none has.
std::string stop_signal();

// True on every rank when any rank has been asked to stop (collective, on the default
// group; `device`: where the backend wants the flag, a CUDA device for "nccl").
bool stop_requested(Device device = Device::cpu());

}  // namespace engine::dist
