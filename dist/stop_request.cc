#include "dist/stop_request.h"

#include <signal.h>

#include "dist/dist.h"
#include "tensor/ops.h"

namespace engine::dist {
namespace {

volatile sig_atomic_t g_stop_signal = 0;

void on_stop(int sig) { g_stop_signal = sig; }

}  // namespace

void catch_stop_signals() {
  for (const int sig : {SIGTERM, SIGINT, SIGHUP}) {
    struct sigaction old {};
    if (sigaction(sig, nullptr, &old) != 0 || old.sa_handler != SIG_DFL || (old.sa_flags & SA_SIGINFO)) continue;
    struct sigaction sa {};
    sa.sa_handler = on_stop;
    sa.sa_flags = SA_RESTART | SA_RESETHAND;  // a second signal of the kind: the default action, at once
    sigemptyset(&sa.sa_mask);
    sigaction(sig, &sa, nullptr);
  }
}

std::string stop_signal() {
  switch (g_stop_signal) {
    case 0: return "";
    case SIGTERM: return "SIGTERM";
    case SIGINT: return "SIGINT (Ctrl-C)";
    default: return "SIGHUP";
  }
}

bool stop_requested(Device device) {
  Tensor flag = full({1}, g_stop_signal != 0 ? 1.0 : 0.0).to(device);
  all_reduce(flag, ReduceOp::Max);
  return flag.to(Device::cpu()).item() != 0;
}

}  // namespace engine::dist
