// cuBLAS is opened on first use, never at start-up: a CPU-only program does not map it,
// and the entry points the GPU matmul calls resolve in the library installed here. The
// loader itself is checked on libm, which every machine has.
#include <cmath>
#include <fstream>
#include <iostream>
#include <string>

#include "catch2/catch.hpp"
#include "tensor/cuda/kernels.h"
#include "tensor/cuda/runtime.h"
#include "tensor/cuda/shared_library.h"
#include "tensor/ops.h"
#include "tests/testing/gpu.h"

using namespace engine;

namespace {
bool mapped(const std::string& name) {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);)
    if (line.find(name) != std::string::npos) return true;
  return false;
}
}  // namespace

TEST_CASE("SharedLibrary finds functions by name and names what it cannot find") {
  cuda::SharedLibrary libm("libm.so.6", "the maths library");
  double (*cosine)(double) = libm.function("cos");
  REQUIRE(cosine(0.0) == 1.0);
  REQUIRE(cosine(M_PI) == Approx(-1.0));
  REQUIRE(libm.path().find("libm") != std::string::npos);
  REQUIRE(mapped("/libm.so.6"));
  REQUIRE_THROWS_WITH(libm.function("no_such_function_here"),
                      Catch::Contains("no function no_such_function_here") && Catch::Contains("libm"));
  REQUIRE_THROWS_WITH(cuda::SharedLibrary("libengine_missing.so.7", "a test of the error"),
                      Catch::Contains("cannot load libengine_missing.so.7") && Catch::Contains("a test of the error") &&
                          Catch::Contains("LD_LIBRARY_PATH"));
  REQUIRE_FALSE(mapped("libengine_missing"));
}

TEST_CASE("a CPU-only program never maps cuBLAS; the GPU matmul's entry points resolve when it is loaded") {
  // CPU work of every kind the engine's GPU path would use cuBLAS for.
  Tensor a = randn({64, 32}), b = randn({32, 16});
  Tensor c = matmul(a, b);
  REQUIRE(c.shape() == Shape{64, 16});
  REQUIRE_FALSE(mapped("/libcublas.so"));
  REQUIRE_FALSE(mapped("/libnccl.so"));
  // Opening cuBLAS looks up every function gemm() calls.
  const std::string path = testing::library_or_skip("cuBLAS", "libcublas.so.", [] { return cuda::cublas_path(); });
  if (path.empty()) return;
  REQUIRE(path.find("libcublas") != std::string::npos);
  REQUIRE(mapped("/libcublas.so"));
}
