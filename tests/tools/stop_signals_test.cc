// The stop signals a training program catches (tools/stop_signals): a request is taken
// once, and a program started with the signal blocked still hears it.
#include "tools/stop_signals/stop_signals.h"

#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include "catch2/catch.hpp"

namespace {
// Runs `body` in a child process (signal state is per process); its exit status.
template <class Body>
int in_child(Body body) {
  const pid_t pid = fork();
  if (pid == 0) {
    for (int sig : {SIGTERM, SIGINT}) signal(sig, SIG_DFL);  // as a program starts (Catch2 catches these)
    _exit(body());
  }  // no Catch2 in the child: it reports through its status
  int status = 0;
  if (pid < 0 || waitpid(pid, &status, 0) != pid) return -1;
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}
}  // namespace

TEST_CASE("a stop signal is caught as a request, even by a program started with it blocked") {
  for (const bool blocked : {false, true}) {
    INFO("SIGTERM blocked at the start: " << blocked);
    CHECK(in_child([blocked] {
            if (blocked) {  // as a blocked signal is inherited across exec
              sigset_t set;
              sigemptyset(&set);
              sigaddset(&set, SIGTERM);
              sigprocmask(SIG_BLOCK, &set, nullptr);
            }
            engine::catch_stop_signals();
            kill(getpid(), SIGTERM);  // delivered before kill returns, unless blocked
            if (!engine::stop_signal_caught()) return 1;
            return engine::stop_signal() == "SIGTERM" ? 0 : 2;
          }) == 0);
  }
}

TEST_CASE("a signal the program was started ignoring stays ignored") {
  CHECK(in_child([] {
          signal(SIGHUP, SIG_IGN);  // as nohup starts a program
          engine::catch_stop_signals();
          kill(getpid(), SIGHUP);
          return engine::stop_signal_caught() ? 1 : 0;
        }) == 0);
}
