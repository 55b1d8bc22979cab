#include "tensor/cpu_features.h"

#include <algorithm>
#include <cstdlib>
#include <string>

#include "tensor/check.h"

namespace engine {

namespace {
CpuLevel hardware_level() {
  if (__builtin_cpu_supports("avx512f")) return CpuLevel::Avx512;
  if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")) return CpuLevel::Avx2;
  return CpuLevel::Portable;
}
}  // namespace

namespace detail {
CpuLevel capped_cpu_level(CpuLevel hardware, const char* value) {
  if (value == nullptr) return hardware;
  const std::string v = value;
  for (CpuLevel level : {CpuLevel::Portable, CpuLevel::Avx2, CpuLevel::Avx512})
    if (v == cpu_level_name(level)) return std::min(hardware, level);
  throw Error("[cpu] ENGINE_CPU_CAPABILITY=\"" + v.substr(0, 40) +
              "\" is not a level: give default (the portable loops), avx2 or avx512, or leave it unset (the CPU's "
              "best)");
}
}  // namespace detail

const char* cpu_level_name(CpuLevel level) {
  switch (level) {
    case CpuLevel::Portable: return "default";
    case CpuLevel::Avx2: return "avx2";
    case CpuLevel::Avx512: return "avx512";
  }
  return "?";
}

CpuLevel cpu_level() {
  // A bad value throws out of the initialiser, which leaves the static unset: every later
  // call throws too, wherever the first one was caught.
  static const CpuLevel level = detail::capped_cpu_level(hardware_level(), std::getenv("ENGINE_CPU_CAPABILITY"));
  return level;
}

bool cpu_has_avx512() {
  static const bool ok = cpu_level() >= CpuLevel::Avx512;
  return ok;
}

bool cpu_has_avx2() {
  static const bool ok = cpu_level() >= CpuLevel::Avx2;
  return ok;
}

}  // namespace engine
