// The rendezvous check of init_process_group, before any connection between ranks: each
// rank claims its RANK in the store and compares its view of the job with every other
// rank's, so that a misconfigured job fails within seconds, naming the cause and the ranks,
// instead of waiting out the timeout: two processes with one RANK, ranks that disagree on
// WORLD_SIZE, or a rank of another job that found this port (same token, another launcher).
// A rank whose program is another build than rank 0's is warned of (same_program.h).
//
//   RankClaim mine{world, group_rank, local_world, launch_id, machine_id(), getpid(), program_fingerprint(),
//                  program_path()};
//   if (check_rendezvous(store, rank, mine, deadline, false) == Rendezvous::kHeldByRunningGroup)
//     ...  // this machine was restarted while the job ran: wait for the job's restart
#pragma once

#include <string>

#include "dist/socket.h"
#include "dist/store.h"

namespace engine::dist {

struct RankClaim {
  int world = 0, group_rank = -1;  // WORLD_SIZE; the launcher's node rank (GROUP_RANK), -1 without one
  int local_world = -1;            // LOCAL_WORLD_SIZE (the launcher's --nproc_per_node), -1 without one
  std::string launch_id;           // the launcher's ENGINE_LAUNCH_ID, "" without one
  std::string machine;             // machine_id(): "HOST/boot id/pid namespace/shm:..."
  long pid = 0;
  std::string program, path;  // program_fingerprint() and program_path() (same_program.h), "" unknown
  // "pid P on HOST", for messages.
  std::string who() const { return "pid " + std::to_string(pid) + " on " + machine.substr(0, machine.find('/')); }
};

enum class Rendezvous {
  kPassed,
  // This rank's RANK is held, in a process group that has formed (rank 0 sealed its store),
  // by a process another launcher started, on another machine or gone from this one: this
  // machine (or its launcher) was restarted, or the machine replaced, before the other
  // machines noticed that it was lost. The job's ranks will restart (they take it for lost within
  // ENGINE_LINK_TIMEOUT); until then the store belongs to an attempt this rank cannot join.
  // *holder names the process that holds the rank.
  kHeldByRunningGroup,
};

// Throws, after telling every rank (fail_together), when the job is misconfigured; waits
// up to `deadline` for every rank's claim. in_restart: the launcher has restarted the job
// (the timeout's message says how a lost machine joins it).
Rendezvous check_rendezvous(TCPStore& store, int rank, const RankClaim& mine, Deadline deadline, bool in_restart,
                            std::string* holder);

}  // namespace engine::dist
