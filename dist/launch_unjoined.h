// The launcher's watch over ranks that end without joining the group: a rank that exits
// with status 0 without ever entering init_process_group (what it told the launcher:
// launch_notice.h) leaves the ranks that wait for it there waiting until their timeout.
// The ranks of this machine are seen; those of other machines are told through rank 0's
// store. launch_watch.cc calls these once a pass.
//
//   check_left_unjoined(children, since, out, stopping);        // a rank of this machine waits
//   if (tell_other_machines(children, tell, last, next_try, out))  // told: stop kToldGrace later
//     told_at = Clock::now();
//   TellWaiting tell = [&](int rank, const std::string& why) {  // in launch.cc, on several machines
//     return tell_waiting_ranks(args, attempt, rank, why);
//   };
#pragma once

#include <chrono>
#include <string>
#include <vector>

#include "dist/launch_args.h"
#include "dist/launch_watch.h"

namespace engine::dist::launcher {

// A rank of this machine waiting in init_process_group, for a group that has the rank that
// left: once that has lasted 2 s (`since` counts it), the attempt fails, naming both.
void check_left_unjoined(const std::vector<Child>& children, Clock::time_point& since, Outcome& out, bool& stopping);

// Tells every machine's ranks about each rank that left without joining (`tell`), every
// 250 ms (and on `last_try`, as the launcher's last rank ends: it does not stay for this),
// for up to 5 s after the rank was reaped. Returns true once told: the job has failed here
// too, for the reason it sets in `out`.
bool tell_other_machines(std::vector<Child>& children, const TellWaiting& tell, bool last_try,
                         Clock::time_point& next_try, Outcome& out);

// How long this machine's ranks are left running once the other machines' were told: rank
// 0's store must stay up until they have read it (ranks waiting read it 10 times a second).
// The ranks told here fail meanwhile, as consequences: the reason stays the launcher's.
constexpr auto kToldGrace = std::chrono::seconds(1);

// The TellWaiting of a launcher of several machines: leaves `why` under rdzv/error in rank
// 0's store (args.master_addr:master_port, this attempt's), where every rank waiting in
// init_process_group, on any machine, reads it and fails with it. Not where the store holds
// the rank's claim: it did join, without saying so. Waits at most 300 ms for the store.
Told tell_waiting_ranks(const LaunchArgs& args, int attempt, int rank, const std::string& why);

}  // namespace engine::dist::launcher
