#include "dist/stop_request.h"

#include <signal.h>

#include "dist/dist.h"
#include "tensor/ops.h"

namespace engine::dist {

void catch_stop_signals() {
  engine::catch_stop_signals();
  if (has_default_action(SIGPIPE)) signal(SIGPIPE, SIG_IGN);
}

bool stop_requested(Device device) {
  Tensor flag = full({1}, stop_signal_caught() ? 1.0 : 0.0).to(device);
  all_reduce(flag, ReduceOp::Max);
  return flag.to(Device::cpu()).item() != 0;
}

}  // namespace engine::dist
