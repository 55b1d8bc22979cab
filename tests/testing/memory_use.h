// This process's memory as the kernel counts it, for tests that bound what a call adds.
//
//   reset_peak_rss();                              // VmHWM := VmRSS now
//   const int64_t base = status_kb("VmRSS:");
//   ...                                            // the call
//   const int64_t grew_kb = status_kb("VmHWM:") - base;
#pragma once

#include <cstdint>
#include <cstdlib>
#include <fstream>
#include <string>

namespace engine::testing {

// A "Field: N kB" line of /proc/self/status (VmRSS:, VmHWM:, ...), in KiB; -1 if absent.
inline int64_t status_kb(const char* field) {
  std::ifstream f("/proc/self/status");
  const std::string name = field;
  for (std::string line; std::getline(f, line);)
    if (line.rfind(name, 0) == 0) return std::atoll(line.c_str() + name.size());
  return -1;
}

// Starts a new peak: VmHWM is set back to the present resident size. False where the
// kernel does not allow it.
inline bool reset_peak_rss() {
  std::ofstream f("/proc/self/clear_refs");
  f << "5";
  f.flush();
  return bool(f);
}

}  // namespace engine::testing
