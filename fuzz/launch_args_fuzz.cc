// Fuzzes the launcher's command line and the launch environment: the input, split at NUL
// bytes, becomes the launcher's arguments; split at newlines, "KEY=VALUE" lines become the
// environment read_launch_env sees. Either parses or fails with engine::Error.
#include <cstdlib>
#include <sstream>

#include "dist/dist.h"
#include "dist/launch_args.h"
#include "tensor/check.h"

namespace {
const char* kVars[] = {"RANK",
                       "WORLD_SIZE",
                       "LOCAL_RANK",
                       "LOCAL_WORLD_SIZE",
                       "MASTER_ADDR",
                       "MASTER_PORT",
                       "SLURM_PROCID",
                       "SLURM_NTASKS",
                       "SLURM_LOCALID",
                       "SLURM_NTASKS_PER_NODE",
                       "OMPI_COMM_WORLD_RANK",
                       "OMPI_COMM_WORLD_SIZE",
                       "OMPI_COMM_WORLD_LOCAL_RANK",
                       "OMPI_COMM_WORLD_LOCAL_SIZE"};
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> args;
  std::string cur;
  for (char c : text) {
    if (c == '\0')
      args.push_back(cur), cur.clear();
    else
      cur += c;
  }
  args.push_back(cur);
  try {
    (void)engine::dist::parse_launch_args(args, nullptr);
  } catch (const engine::Error&) {}
  for (const char* v : kVars) unsetenv(v);
  std::istringstream lines(text);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t eq = line.find('=');
    if (eq == std::string::npos || eq == 0 || line.find('\0') != std::string::npos) continue;
    const std::string key = line.substr(0, eq);
    for (const char* v : kVars)
      if (key == v) setenv(v, line.substr(eq + 1).c_str(), 1);
  }
  try {
    (void)engine::dist::read_launch_env(true);
  } catch (const engine::Error&) {}
  return 0;
}
