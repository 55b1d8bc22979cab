#include "dist/rendezvous_check.h"

#include <signal.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <fstream>
#include <sstream>
#include <thread>

#include "dist/same_program.h"

namespace engine::dist {

namespace {

// A field without spaces, "-" for none.
std::string field(std::string s) {
  std::replace(s.begin(), s.end(), ' ', '_');
  return s.empty() ? "-" : s;
}

// "WORLD GROUP_RANK LOCAL_WORLD LAUNCH_ID MACHINE PID PROGRAM PATH", fields without spaces.
std::string encode(const RankClaim& c) {
  return std::to_string(c.world) + " " + std::to_string(c.group_rank) + " " + std::to_string(c.local_world) + " " +
         field(c.launch_id) + " " + field(c.machine) + " " + std::to_string(c.pid) + " " + field(c.program) + " " +
         field(c.path);
}

RankClaim decode(const std::string& s) {
  RankClaim c;
  std::istringstream in(s);
  in >> c.world >> c.group_rank >> c.local_world >> c.launch_id >> c.machine >> c.pid >> c.program >> c.path;
  for (std::string* f : {&c.launch_id, &c.machine, &c.program, &c.path})
    if (*f == "-") f->clear();
  return c;
}

// Why two launchers' ranks disagree, where the launchers of two machines were started with
// different --nproc_per_node (a typo, or =auto on machines that differ: it counts each
// machine's own CPUs or GPUs); "" where that is not it. (Two launchers with one node rank
// are two jobs on one port, or one --node_rank typed twice: said apart.)
std::string launchers_differ(const RankClaim& a, const RankClaim& b) {
  if (a.launch_id.empty() || b.launch_id.empty() || a.launch_id == b.launch_id || a.group_rank == b.group_rank ||
      a.local_world < 1 || b.local_world < 1 || a.local_world == b.local_world)
    return "";
  auto node = [](const RankClaim& c) {
    return "node " + std::to_string(c.group_rank) + "'s (" + c.machine.substr(0, c.machine.find('/')) + ") " +
           std::to_string(c.local_world) + (c.local_world == 1 ? " rank" : " ranks");
  };
  const bool in_order = a.group_rank <= b.group_rank;
  return "[init_process_group] the machines' launchers started different numbers of ranks: " + node(in_order ? a : b) +
         ", " + node(in_order ? b : a) +
         ". Give every launcher the same --nproc_per_node (auto, cpu and gpu count each machine's own CPUs or "
         "GPUs, which may differ: give a number there)";
}

// Whether two claims' programs are known and differ.
bool other_program(const RankClaim& a, const RankClaim& b) {
  return !a.program.empty() && !b.program.empty() && a.program != b.program;
}

// Said once the ranks have met: by each rank whose program is another build than rank 0's,
// and by rank 0, naming them all.
void warn_of_other_programs(int rank, const RankClaim& mine, const RankClaim& rank0, const std::string& others) {
  if (rank != 0 && other_program(mine, rank0))
    std::fprintf(stderr,
                 "[init_process_group] warning: rank %d (%s) runs another build of the program than rank 0 (%s): "
                 "here %s; rank 0 runs %s. DDP averages whatever gradients the ranks send, so a rank left with "
                 "an older build trains on silently: rebuild (or copy) the same program on every machine\n",
                 rank, mine.who().c_str(), rank0.who().c_str(), describe_program(mine.path, mine.program).c_str(),
                 describe_program(rank0.path, rank0.program).c_str());
  if (rank == 0 && !others.empty())
    std::fprintf(stderr,
                 "[init_process_group] warning: %s %s %s another build of the program than rank 0 (%s), each "
                 "says how: rebuild (or copy) the same program on every machine\n",
                 others.find(',') == std::string::npos ? "rank" : "ranks", others.c_str(),
                 others.find(',') == std::string::npos ? "runs" : "run",
                 describe_program(mine.path, mine.program).c_str());
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

// The ranks from `from` on whose claims are not in the store, the first 16 named: "1, 3".
std::string absent_ranks(TCPStore& store, int from, int world, int* count) {
  std::string names, value;
  *count = 0;
  for (int k = from; k < world; ++k)
    if (!store.try_get("rdzv/rank/" + std::to_string(k), &value) && ++*count <= 16)
      names += (*count > 1 ? ", " : "") + std::to_string(k);
  if (*count > 16) names += ", ...";
  return names;
}

// "10 s", "0.7 s".
std::string seconds_words(Clock::duration d) {
  const double s = std::chrono::duration<double>(d).count();
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 1 ? "%.1f s" : "%.0f s", s);
  return buf;
}

// Rank 0's word while it waits: a machine whose launcher was never started would otherwise
// leave the job silent for the whole timeout (300 s by default), as if it had hung.
void note_waiting(TCPStore& store, int from, int world, Clock::duration waited, Clock::duration timeout) {
  int absent = 0;
  const std::string missing = absent_ranks(store, from, world, &absent);
  std::fprintf(stderr,
               "[init_process_group] rank 0 has waited %s for rank(s) %s to connect (%d of %d have; it waits up to "
               "%s, ENGINE_DIST_TIMEOUT): start them if they have not been. One that cannot reach rank 0 says "
               "why itself\n",
               seconds_words(waited).c_str(), missing.c_str(), world - absent, world, seconds_words(timeout).c_str());
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
    if (const std::string why = launchers_differ(other, mine); !why.empty()) fail(why);
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
  std::string error, other_programs;
  RankClaim rank0 = mine;
  // Rank 0 says who it waits for after 10 s (a third of a short timeout), then every minute.
  const Clock::time_point start = Clock::now();
  const Clock::duration note_every = std::min<Clock::duration>(std::chrono::seconds(10), (deadline - start) / 3);
  Clock::time_point next_note = start + note_every;
  for (int r = 0; r < mine.world; ++r) {
    if (r == rank) continue;  // its own claim is `mine`, set above
    std::string value;
    while (!read_while_waiting(store, "rdzv/rank/" + std::to_string(r), r, me, &value)) {
      if (read_while_waiting(store, "rdzv/error", r, me, &error)) fail(error);
      if (rank == 0 && Clock::now() > next_note) {
        note_waiting(store, r, mine.world, Clock::now() - start, deadline - start);
        next_note = Clock::now() + 6 * note_every;
      }
      if (Clock::now() > deadline) {
        int absent = 0;
        const std::string missing = absent_ranks(store, r, mine.world, &absent);
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
    if (r == 0) rank0 = other;
    if (rank == 0 && other_program(mine, other))
      other_programs += (other_programs.empty() ? "" : ", ") + std::to_string(r);
    if (const std::string why = launchers_differ(other, mine); !why.empty()) fail(why);
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
  warn_of_other_programs(rank, mine, rank0, other_programs);
  return Rendezvous::kPassed;
}

}  // namespace engine::dist
