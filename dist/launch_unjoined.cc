// The launcher's watch over ranks that end without joining the group (launch_unjoined.h).
#include "dist/launch_unjoined.h"

#include <sys/wait.h>
#include <unistd.h>

#include <string>

#include "dist/addresses.h"
#include "dist/store.h"
#include "tensor/check.h"

namespace engine::dist::launcher {
namespace {

// How long a rank may wait in init_process_group for a rank that ended without joining
// before the launcher ends the attempt. Not 0: a rank whose environment lost the notice
// variable joins unseen, and the "joined" of a rank that did is read a moment later.
constexpr auto kUnjoinedGrace = std::chrono::seconds(2);

// A rank that exited with status 0 without ever entering init_process_group
// (RankNotices: launch_notice.h), and how the launcher names it.
bool left_unjoined(const Child& c) {
  return !c.running && WIFEXITED(c.status) && WEXITSTATUS(c.status) == 0 && c.notices.init_world == 0;
}

std::string left_words(const Child& c) {
  return "rank " + std::to_string(c.rank) + " (pid " + std::to_string(c.pid) +
         ") exited with status 0 without joining the group (it never called init_process_group)";
}

// How long, after a rank left without joining, the ranks of other machines are tried: rank
// 0 may not serve its store yet. A rank 0 that left has no store to tell.
constexpr auto kTellFor = std::chrono::seconds(5);

}  // namespace

// A rank that exited with status 0 without ever entering init_process_group, while another
// rank of this machine waits there for a group it belongs to (RankNotices: launch_notice.h),
// will never join: the waiting rank would sit out the rendezvous timeout (300 s by default).
// Once that has lasted kUnjoinedGrace, the attempt ends, naming both. (Ranks on other
// machines, not seen here, are told by tell_other_machines.)
void check_left_unjoined(const std::vector<Child>& children, Clock::time_point& since, Outcome& out, bool& stopping) {
  const Child *left = nullptr, *waiting = nullptr;
  for (const Child& c : children) {
    if (!left_unjoined(c)) continue;
    for (const Child& w : children)
      if (w.running && !w.notices.joined && w.notices.init_world > c.rank && !waiting) left = &c, waiting = &w;
  }
  if (left == nullptr) {
    since = {};
    return;
  }
  if (since == Clock::time_point{}) since = Clock::now();
  if (Clock::now() - since < kUnjoinedGrace) return;
  out.exit_code = 1;
  out.reason = left_words(*left) + ", while rank " + std::to_string(waiting->rank) +
               " waits in init_process_group for all " + std::to_string(waiting->notices.init_world) +
               " ranks: the group cannot form without it";
  stopping = true;
}

// Ranks of other machines are told once, for the first rank found that left (rank 0 serves
// the store: if it left, there is none to tell).
bool tell_other_machines(std::vector<Child>& children, const TellWaiting& tell, bool last_try,
                         Clock::time_point& next_try, Outcome& out) {
  if (!tell || (Clock::now() < next_try && !last_try)) return false;
  next_try = Clock::now() + std::chrono::milliseconds(250);
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  for (Child& c : children) {
    if (!left_unjoined(c) || c.rank == 0 || c.tell_done) continue;
    const Told told =
        tell(c.rank, "[launch on " + std::string(host) + "] " + left_words(c) + ": the group cannot form without it");
    if (told == Told::kYes) {
      c.tell_done = true;
      out.exit_code = 1;
      out.reason = left_words(c) + "; the ranks waiting for it were told so through rank 0's store";
      return true;
    }
    // Nothing to tell, or no store answered in time: nobody waits for it there.
    if (told == Told::kItJoined || Clock::now() - c.reaped_at > kTellFor) c.tell_done = true;
  }
  return false;
}

// Each try waits at most 300 ms for the store (launch_unjoined.h).
Told tell_waiting_ranks(const LaunchArgs& args, int attempt, int rank, const std::string& why) {
  StoreOptions so;
  so.timeout = std::chrono::milliseconds(300);
  so.token = args.token;
  so.generation = uint32_t(attempt) << 16;  // as the ranks of this attempt present it (dist.cc)
  try {
    resolve(args.master_addr, args.master_port);  // quietly: the store would say it can't
    TCPStore store(args.master_addr, args.master_port, /*is_server=*/false, so);
    std::string claim;
    if (store.try_get("rdzv/rank/" + std::to_string(rank), &claim)) return Told::kItJoined;
    store.compare_set("rdzv/error", "", why);
    return Told::kYes;
  } catch (const Error&) {
    return Told::kNoStoreYet;
  }
}

}  // namespace engine::dist::launcher
