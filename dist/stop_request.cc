#include "dist/stop_request.h"

#include "dist/dist.h"
#include "tensor/ops.h"

namespace engine::dist {

bool stop_requested(Device device) {
  Tensor flag = full({1}, stop_signal_caught() ? 1.0 : 0.0).to(device);
  all_reduce(flag, ReduceOp::Max);
  return flag.to(Device::cpu()).item() != 0;
}

}  // namespace engine::dist
