// A distributed job asked to stop (SIGTERM from a scheduler or `timeout`, Ctrl-C, SIGHUP,
// a scheduler's SIGUSR1/SIGUSR2 warning: see tools/stop_signals/stop_signals.h). A training
// loop that asks stop_requested() after every step saves its state and ends at a step
// boundary every rank agrees on, so that the same command with --resume loses no step,
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
// same step.
#pragma once

#include "tensor/device.h"
#include "tools/stop_signals/stop_signals.h"

namespace engine::dist {

using engine::kStoppedOnRequest;
using engine::stop_signal;

// engine::catch_stop_signals(), and SIGPIPE ignored: a rank that saves on request must
// outlive its output. When its launcher is killed (kill -9, the out-of-memory killer), a
// rank is sent SIGTERM and its stdout leads nowhere; SIGPIPE would end it at its next line,
// before it saves.
void catch_stop_signals();

// True on every rank when any rank has been asked to stop (collective, on the default
// group; `device`: where the backend wants the flag, a CUDA device for "nccl").
bool stop_requested(Device device = Device::cpu());

}  // namespace engine::dist
