// The dispatch's level and its cap, ENGINE_CPU_CAPABILITY: the rule on its own, and (run by
// //tests:portable_loops_test and //tests:avx2_loops_test with the variable set) that every
// fast path the engine asks about follows it.
#include "tensor/cpu_features.h"

#include <catch2/catch.hpp>
#include <cstdlib>
#include <string>

#include "tensor/check.h"
#include "tensor/gemm.h"
#include "tensor/gemm_nt.h"

using namespace engine;

TEST_CASE("ENGINE_CPU_CAPABILITY caps the CPU's level and never raises it") {
  using detail::capped_cpu_level;
  for (CpuLevel cpu : {CpuLevel::Portable, CpuLevel::Avx2, CpuLevel::Avx512}) {
    CHECK(capped_cpu_level(cpu, nullptr) == cpu);  // unset: the CPU's best
    CHECK(capped_cpu_level(cpu, "default") == CpuLevel::Portable);
    CHECK(capped_cpu_level(cpu, "avx2") == std::min(cpu, CpuLevel::Avx2));
    CHECK(capped_cpu_level(cpu, "avx512") == cpu);
  }
}

TEST_CASE("a value that names no level is refused, naming the variable and the levels") {
  for (const char* bad : {"", "AVX2", "avx", "avx512 ", "sse", "portable", "avx512vl"})
    CHECK_THROWS_WITH(detail::capped_cpu_level(CpuLevel::Avx512, bad),
                      Catch::Contains("ENGINE_CPU_CAPABILITY=\"" + std::string(bad) + "\" is not a level") &&
                          Catch::Contains("default (the portable loops), avx2 or avx512"));
}

TEST_CASE("the fast paths follow the level the dispatch runs at") {
  const CpuLevel level = cpu_level();
  INFO("dispatch level " << cpu_level_name(level));
  if (const char* v = std::getenv("ENGINE_CPU_CAPABILITY")) {
    // The binaries of the loops' tests are run again with the variable set: say what ran.
    std::printf("ENGINE_CPU_CAPABILITY=%s: the dispatch runs at %s\n", v, cpu_level_name(level));
    CHECK(level <= detail::capped_cpu_level(CpuLevel::Avx512, v));
  }
  CHECK(cpu_has_avx512() == (level >= CpuLevel::Avx512));
  CHECK(cpu_has_avx2() == (level >= CpuLevel::Avx2));
  CHECK(gemm_kernel_supported(GemmKernel::Avx512) == cpu_has_avx512());
  CHECK(gemm_kernel_supported(GemmKernel::Avx2) == cpu_has_avx2());
  CHECK(gemm_nt_has_kernel() == cpu_has_avx512());
  CHECK(gemm_kernel_supported(GemmKernel::Scalar));
  if (!cpu_has_avx512())
    CHECK_THROWS_WITH(gemm(1, 1, 1, nullptr, 1, 1, nullptr, 1, 1, nullptr, 1, 1, false, GemmKernel::Avx512),
                      Catch::Contains("is not supported here") && Catch::Contains("ENGINE_CPU_CAPABILITY"));
}
