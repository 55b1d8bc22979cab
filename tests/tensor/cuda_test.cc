// The CUDA part of the build: on a machine with a GPU the first kernel runs and matches
// the CPU; elsewhere the test says it was skipped and why, and passes.
#include <iostream>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/cuda/runtime.h"
#include "tensor/tensor.h"

using namespace engine;

TEST_CASE("saxpy on the GPU matches the CPU, or is skipped with the reason") {
  if (cuda::device_count() == 0) {
    const std::string why = cuda::unavailable_reason();
    std::cout << "SKIPPED: CUDA test (built with CUDA: " << (cuda::built_with_cuda() ? "yes" : "no")
              << "; no usable GPU: " << why << ")" << std::endl;
    WARN("SKIPPED: no usable GPU: " << why);
    REQUIRE_FALSE(why.empty());
    // Without a GPU, device allocations must fail with a clear error, not crash.
    REQUIRE_THROWS_WITH(zeros({4}, DType::Float32, Device::cuda(0)), Catch::Contains("[cuda]"));
    return;
  }
  const int64_t n = 100003;  // not a multiple of the block size
  std::vector<float> x(n), y(n), expect(n);
  for (int64_t i = 0; i < n; ++i) x[i] = float(i % 97) * 0.5f, y[i] = float(i % 13) - 6.0f;
  for (int64_t i = 0; i < n; ++i) expect[i] = 2.5f * x[i] + y[i];
  cuda::saxpy_on_device(n, 2.5f, x.data(), y.data(), 0);
  for (int64_t i = 0; i < n; ++i) REQUIRE(y[i] == expect[i]);
  // A host -> device -> host round trip through Tensor::to.
  Tensor a = arange(0, 10);
  Tensor back = a.to(Device::cuda(0)).to(Device::cpu());
  REQUIRE(back.to_vector<float>() == a.to_vector<float>());
}
