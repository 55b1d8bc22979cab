#include "tools/stop_signals/stop_signals.h"

#include <signal.h>

#include <atomic>

namespace engine {
namespace {

// An atomic, not a volatile sig_atomic_t: in a program with threads the kernel runs the
// handler on any thread that does not block the signal (a collective's worker, the store's
// server), while the main thread reads the flag, and only an atomic orders that write and
// read between threads. A lock-free atomic may be used in a signal handler.
std::atomic<int> g_stop_signal{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs a lock-free atomic");

// Keeps the first: it is the one the program reports.
void on_stop(int sig) {
  int none = 0;
  g_stop_signal.compare_exchange_strong(none, sig);
}

}  // namespace

void catch_stop_signals() {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP, SIGUSR1, SIGUSR2}) {
    if (!has_default_action(sig)) continue;
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    // Ctrl-C pressed twice ends the process at once: the handler is taken off when it runs.
    sa.sa_flags = SA_RESTART | (sig == SIGINT ? SA_RESETHAND : 0);
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
    unblock_signal(sig);
  }
}

void unblock_signal(int sig) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, sig);
  pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
}

bool has_default_action(int sig) {
  struct sigaction old {};
  return sigaction(sig, nullptr, &old) == 0 && old.sa_handler == SIG_DFL && !(old.sa_flags & SA_SIGINFO);
}

bool stop_signal_caught() { return g_stop_signal.load() != 0; }

std::string stop_signal() {
  switch (g_stop_signal.load()) {
    case 0: return "";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT (Ctrl-C)";
    case SIGHUP: return "SIGHUP";
    case SIGUSR1: return "SIGUSR1";
    default: return "SIGUSR2";
  }
}

}  // namespace engine
