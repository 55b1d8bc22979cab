// The "nccl" backend in a build without the CUDA toolkit.
#include "dist/nccl_group.h"
#include "tensor/check.h"

namespace engine::dist {

std::unique_ptr<ProcessGroup> make_nccl_group(std::shared_ptr<TCPStore>, int, int, int, std::chrono::milliseconds) {
  throw Error(
      "[init_process_group] backend \"nccl\" is not available: this build has no CUDA (no toolkit was found "
      "at build time). Use \"gloo\" for CPU training, or rebuild on a machine with the CUDA toolkit.");
}

std::string nccl_path() {
  throw Error("[nccl] NCCL is not available: this build has no CUDA (no toolkit was found at build time)");
}

}  // namespace engine::dist
