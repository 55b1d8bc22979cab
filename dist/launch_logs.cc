// The launcher's per-rank log files (launch_logs.h).
#include "dist/launch_logs.h"

#include <stdlib.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "tensor/check.h"

namespace engine::dist::launcher {

std::string make_run_log_dir(const std::string& log_dir, const std::string& run_id) {
  std::error_code ec;
  std::filesystem::create_directories(log_dir, ec);
  if (ec) throw Error("cannot make the log folder " + log_dir + " (--log_dir): " + ec.message());
  std::string name = log_dir + "/" + run_id + "_XXXXXX";  // mkdtemp fills in the X's, never an existing name
  if (!::mkdtemp(name.data()))
    throw Error("cannot make a folder for this run's logs in " + log_dir + " (--log_dir): " + std::strerror(errno));
  return name;
}

FILE* open_rank_log(const std::string& run, int attempt, int local_rank, const char* name) {
  const std::string dir = run + "/attempt_" + std::to_string(attempt) + "/" + std::to_string(local_rank);
  std::error_code ec;
  std::filesystem::create_directories(dir, ec);
  if (ec) throw Error("cannot make the log folder " + dir + ": " + ec.message());
  const std::string path = dir + "/" + name;
  FILE* f = std::fopen(path.c_str(), "we");  // e: O_CLOEXEC
  if (!f) throw Error("cannot write the log file " + path + ": " + std::strerror(errno));
  return f;
}

}  // namespace engine::dist::launcher
