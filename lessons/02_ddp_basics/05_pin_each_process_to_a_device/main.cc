// Lesson 2, step 5: pin each process to one device. The local rank picks the GPU, so that
// every process owns exactly one card and no two pile onto the same one. On a machine
// without a GPU each process stays on the CPU, and says why.
//
//   bazel run //lessons/02_ddp_basics:05_pin_each_process_to_a_device
#include <cstdio>

#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "tensor/cuda/runtime.h"

using namespace engine;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), local_rank = dist::get_local_rank();
  Device device = Device::cpu();
  if (cuda::device_count() > 0) {
    cuda::set_device(local_rank);  // torch.cuda.set_device(local_rank)
    device = Device::cuda(local_rank);
  } else {
    std::printf("rank %d: no GPU (%s), so it computes on the CPU\n", rank, cuda::unavailable_reason().c_str());
  }
  auto model = lessons::toy_mlp(0);
  model->to(device);  // model = model.to(local_rank)
  std::printf("rank %d: local rank %d -> device %s; model on %s\n", rank, local_rank, device.str().c_str(),
              model->parameters()[0].data().device().str().c_str());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "05_pin_each_process_to_a_device: %s\n", e.what());
  return 1;
}
