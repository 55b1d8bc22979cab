// For tests of CUDA code: skip (saying why) where there is no GPU, compare a GPU result
// with its CPU reference otherwise.
//
//   TEST_CASE("relu on the GPU matches the CPU") {
//     if (!testing::gpu_or_skip("relu")) return;       // prints "SKIPPED: relu (no usable GPU: ...)"
//     Generator g = testing::fresh_generator();        // new inputs every run, seed printed on failure
//     Tensor x = randn({1000}, &g);
//     REQUIRE(testing::rel_error(relu(x.to(testing::gpu())), relu(x)) <= 1e-6);
//   }
#pragma once

#include <cmath>
#include <functional>
#include <iostream>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/cuda/runtime.h"
#include "tensor/ops.h"

namespace engine::testing {

inline Device gpu() { return Device::cuda(0); }

// True when a GPU is usable; then every new device block is poisoned (runtime.h) so an
// unwritten output element reads NaN. Otherwise prints and warns why the test is skipped.
inline bool gpu_or_skip(const std::string& what) {
  if (cuda::device_count() > 0) {
    cuda::poison_new_memory(true);
    return true;
  }
  const std::string why = cuda::unavailable_reason();
  std::cout << "SKIPPED: " << what << " (built with CUDA: " << (cuda::built_with_cuda() ? "yes" : "no")
            << "; no usable GPU: " << why << ")" << std::endl;
  WARN("SKIPPED: " << what << ": no usable GPU: " << why);
  return false;
}

// For tests that open a CUDA library: `load` opens it and returns the file it came from.
// Returns that path, or "" after saying why the test is skipped: a build without CUDA (and
// `load` must then say so) or a machine without the library (and the error must name it).
inline std::string library_or_skip(const std::string& what, const std::string& soname_prefix,
                                   const std::function<std::string()>& load) {
  if (!cuda::built_with_cuda()) {
    std::cout << "SKIPPED: loading " << what << " (this build has no CUDA)" << std::endl;
    REQUIRE_THROWS_WITH(load(), Catch::Contains("no CUDA"));
    return "";
  }
  try {
    return load();
  } catch (const Error& e) {
    const std::string why = e.what();
    REQUIRE(why.find("cannot load " + soname_prefix) != std::string::npos);  // missing here, and said so
    std::cout << "SKIPPED: loading " << what << " (not installed on this machine: " << why << ")" << std::endl;
    WARN("SKIPPED: " << why);
    return "";
  }
}

// A generator seeded differently on every run; the seed is reported with any failure.
inline Generator fresh_generator() {
  const uint64_t seed = std::random_device{}();
  UNSCOPED_INFO("random seed " << seed);
  return Generator(seed);
}

// Both tensors' values as float on the host (shapes must match).
inline std::pair<std::vector<float>, std::vector<float>> host_values(const Tensor& got, const Tensor& want) {
  REQUIRE(got.shape() == want.shape());
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::Float32).to_vector<float>(); };
  return {host(got), host(want)};
}

// ||got - want|| / ||want|| over all elements; the max-norm of got - want when want is all
// zeros. A NaN on one side only gives NaN, which fails any `<=` bound.
inline double rel_error(const Tensor& got, const Tensor& want) {
  const auto [a, b] = host_values(got, want);
  double diff = 0, norm = 0, worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
    if (std::isnan(a[i])) continue;  // NaN where the reference has NaN too: agreed
    const double d = double(a[i]) - double(b[i]);
    diff += d * d, norm += double(b[i]) * double(b[i]), worst = std::max(worst, std::fabs(d));
  }
  return norm > 0 ? std::sqrt(diff / norm) : worst;
}

// The largest |got - want| over all elements (NaN where either has a NaN the other lacks).
inline double max_abs_error(const Tensor& got, const Tensor& want) {
  const auto [a, b] = host_values(got, want);
  double worst = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::isnan(a[i]) != std::isnan(b[i])) return NAN;
    if (!std::isnan(a[i])) worst = std::max(worst, std::fabs(double(a[i]) - double(b[i])));
  }
  return worst;
}

}  // namespace engine::testing
