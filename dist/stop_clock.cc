#include "dist/stop_clock.h"

#include <errno.h>
#include <sched.h>
#include <signal.h>
#include <time.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <mutex>

#include "tools/stop_signals/stop_signals.h"

namespace engine::dist {
namespace {

// CLOCK_MONOTONIC, as steady_clock; async-signal-safe, so the handler reads it too.
int64_t steady_ns() {
  timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
}

// Readings further apart than this may span a stop. Every wait reads the clock at least
// every second (its polls are sliced so), so a waiting process never leaves such a gap.
constexpr int64_t kGapNs = 1000000000;
// How long the reading that ends a gap waits for SIGCONT's handler: the kernel wakes every
// thread at once and runs the handler on one of them, perhaps a moment after this one.
constexpr int64_t kHandlerWaitNs = 2000000;
constexpr int64_t kStepNs = 1000000;  // the latest reading is kept to this

std::atomic<bool> g_watching{false};
std::atomic<int64_t> g_last{0};          // the latest reading (steady ns)
std::atomic<int64_t> g_stopped{0};       // the time taken off (ns)
std::atomic<int64_t> g_continued_at{0};  // when the latest SIGCONT arrived (steady ns)
std::mutex g_gap_mutex;
int64_t g_taken_off_until = 0;  // under g_gap_mutex: the end of the last gap taken off

void on_continue(int) {
  const int saved = errno;
  g_continued_at.store(steady_ns());
  errno = saved;
}

// No reading between `from` and `to`: if a SIGCONT came after `from`, the process was
// stopped in between, and the whole gap is taken off (the time before the stop in it was
// spent without waiting on anything, or the wait would have read the clock).
void account_gap(int64_t from, int64_t to) {
  std::lock_guard<std::mutex> lock(g_gap_mutex);
  from = std::max(from, g_taken_off_until);  // another thread has taken this gap off
  if (to - from <= kGapNs) return;
  for (const int64_t until = steady_ns() + kHandlerWaitNs; g_continued_at.load() <= from && steady_ns() < until;)
    sched_yield();
  if (g_continued_at.load() <= from) return;  // not stopped: the gap counts
  g_stopped.fetch_add(to - from);
  g_taken_off_until = to;
}

}  // namespace

Clock::time_point Clock::now() noexcept {
  const int64_t t = steady_ns();
  if (g_watching.load(std::memory_order_relaxed)) {
    int64_t last = g_last.load();
    // Accounted before the latest reading moves on, so that a thread reading the clock
    // meanwhile sees the gap too and waits for the account rather than read past it.
    if (last != 0 && t - last > kGapNs) account_gap(last, t);
    // Moved on at most once a millisecond: waits that spin read the clock far more often,
    // and the gaps that matter are seconds.
    while (last + kStepNs < t && !g_last.compare_exchange_weak(last, t)) {}
  }
  return time_point(std::chrono::nanoseconds(t - g_stopped.load()));
}

void watch_for_stops() {
  static std::once_flag once;
  std::call_once(once, [] {
    struct sigaction old {};
    if (sigaction(SIGCONT, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) return;
    struct sigaction sa {};
    sa.sa_handler = on_continue;
    sa.sa_flags = SA_RESTART;  // reads and writes carry on; a poll or a sleep returns EINTR, as for any signal
    sigemptyset(&sa.sa_mask);
    if (sigaction(SIGCONT, &sa, nullptr) != 0) return;
    // Blocked (inherited so), SIGCONT still continues the process but the handler never runs.
    engine::unblock_signal(SIGCONT);
    g_last.store(steady_ns());
    g_watching.store(true);
  });
}

Clock::duration time_stopped() { return std::chrono::nanoseconds(g_stopped.load()); }

}  // namespace engine::dist
