#include "dist/rendezvous_check.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <fstream>
#include <sstream>
#include <thread>

namespace engine::dist {

namespace {

// "WORLD GROUP_RANK LAUNCH_ID MACHINE PID", fields without spaces.
std::string encode(const RankClaim& c) {
  std::string machine = c.machine.empty() ? "-" : c.machine;
  std::replace(machine.begin(), machine.end(), ' ', '_');
  return std::to_string(c.world) + " " + std::to_string(c.group_rank) + " " +
         (c.launch_id.empty() ? "-" : c.launch_id) + " " + machine + " " + std::to_string(c.pid);
}

RankClaim decode(const std::string& s) {
  RankClaim c;
  std::istringstream in(s);
  in >> c.world >> c.group_rank >> c.launch_id >> c.machine >> c.pid;
  if (c.launch_id == "-") c.launch_id.clear();
  if (c.machine == "-") c.machine.clear();
  return c;
}

// Whether process pid runs on this machine: a zombie (killed, not yet reaped by whoever
// inherited it) does not.
bool process_alive(long pid) {
  if (::kill(pid_t(pid), 0) != 0 && errno == ESRCH) return false;
  std::ifstream stat("/proc/" + std::to_string(pid) + "/stat");
  std::string line;
  if (!std::getline(stat, line)) return true;  // no /proc: kill() said it exists
  const size_t paren = line.rfind(')');        // "PID (COMM) STATE ...": COMM may hold spaces
  return paren == std::string::npos || paren + 2 >= line.size() || (line[paren + 2] != 'Z' && line[paren + 2] != 'X');
}

// Whether the process that holds this rank's claim is this rank's own earlier self, from
// before its machine was restarted (or replaced), in a group that has formed: another
// launcher's process, gone from this machine or on another one, with rank 0's store sealed
// (it publishes restart_of_group then). A live process on this machine is a duplicate.
bool held_by_running_group(TCPStore& store, const RankClaim& held, const RankClaim& mine) {
  if (held.launch_id.empty() || mine.launch_id.empty() || held.launch_id == mine.launch_id) return false;
  const bool gone = held.machine != mine.machine || (held.pid > 0 && !process_alive(held.pid));
  std::string restart;
  return gone && store.try_get("restart_of_group", &restart);
}

// The store's key, read while waiting for rank r's claim. A store that closes meanwhile
// (rank 0 gave up or failed) is reported with the rank this one was waiting for.
bool read_while_waiting(TCPStore& store, const std::string& key, int r, const std::string& me, std::string* value) {
  try {
    return store.try_get(key, value);
  } catch (const Error& e) {
    throw Error("[init_process_group] " + me + " was waiting for rank " + std::to_string(r) +
                " to connect: " + e.what());
  }
}

}  // namespace

Rendezvous check_rendezvous(TCPStore& store, int rank, const RankClaim& mine, Deadline deadline, bool in_restart,
                            std::string* holder) {
  const std::string me = "rank " + std::to_string(rank);
  // A problem found here (or by another rank: rdzv/error) ends every rank with its reason.
  auto fail = [&](const std::string& why) { fail_together(store, "rdzv/", rank, mine.world, why); };
  const std::string held = store.compare_set("rdzv/rank/" + std::to_string(rank), "", encode(mine));
  if (held != encode(mine)) {
    const RankClaim other = decode(held);
    if (held_by_running_group(store, other, mine)) {
      *holder = other.who();
      return Rendezvous::kHeldByRunningGroup;
    }
    // Two launchers of one job (another launch_id) with one node rank: the same --node_rank
    // typed on two machines.
    const bool same_node_rank = !other.launch_id.empty() && !mine.launch_id.empty() &&
                                other.launch_id != mine.launch_id && other.group_rank == mine.group_rank &&
                                mine.group_rank >= 0;
    fail("[init_process_group] two processes claim RANK=" + std::to_string(rank) + ": " + other.who() + " and " +
         mine.who() +
         (same_node_rank ? "; both were started by launchers given --node_rank=" + std::to_string(mine.group_rank) +
                               ": give each machine's launcher its own --node_rank, from 0 to --nnodes - 1 (or "
                               "--rdzv_backend=c10d without --node_rank, which hands them out)"
                         : "; every process needs its own RANK"));
  }
  std::string error, missing;
  for (int r = 0; r < mine.world; ++r) {
    if (r == rank) continue;  // its own claim is `mine`, set above
    std::string value;
    while (!read_while_waiting(store, "rdzv/rank/" + std::to_string(r), r, me, &value)) {
      if (read_while_waiting(store, "rdzv/error", r, me, &error)) fail(error);
      if (Clock::now() > deadline) {
        int absent = 0;
        for (int k = r; k < mine.world; ++k)
          if (!store.try_get("rdzv/rank/" + std::to_string(k), &value) && ++absent <= 16)  // the first few named
            missing += (absent > 1 ? ", " : "") + std::to_string(k);
        if (absent > 16) missing += ", ...";
        // Told to the ranks that did come (rank 0 waits for them to read it before its
        // store closes), so that each names the missing ranks too.
        fail_together(store, "rdzv/", rank, mine.world,
                      "[init_process_group] " + me + " timed out waiting for rank(s) " + missing +
                          " to connect: they have not started, failed, or were refused" +
                          (in_restart ? "; in a restart, a machine that was lost whole joins it when its "
                                        "launcher is started again with the same command"
                                      : ""),
                      mine.world - 1 - absent);
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(2));
    }
    const RankClaim other = decode(value);
    if (other.world != mine.world)
      fail("[init_process_group] ranks disagree on WORLD_SIZE: rank " + std::to_string(r) + " (" + other.who() +
           ") has " + std::to_string(other.world) + ", " + me + " (" + mine.who() + ") has " +
           std::to_string(mine.world) +
           (other.launch_id.empty() || mine.launch_id.empty()
                ? "; start every rank with the same WORLD_SIZE"
                : "; both were started by launchers, which set WORLD_SIZE to --nnodes x --nproc_per_node: give every "
                  "machine's launcher the same --nnodes and --nproc_per_node"));
    // Two launchers on one node are two jobs: same token and port, but not one job.
    if (other.group_rank == mine.group_rank && other.group_rank >= 0 && !other.launch_id.empty() &&
        !mine.launch_id.empty() && other.launch_id != mine.launch_id)
      fail("[init_process_group] another job is using MASTER_PORT " + std::to_string(store.port()) +
           " with the same token: rank " + std::to_string(r) + " (" + other.who() +
           ") was started by another "
           "launcher than " +
           me + " (" + mine.who() +
           "); give each job its own --master_port (or let the launcher "
           "pick one)");
  }
  if (store.try_get("rdzv/error", &error)) fail(error);
  return Rendezvous::kPassed;
}

}  // namespace engine::dist
