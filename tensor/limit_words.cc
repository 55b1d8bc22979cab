// Resource limits in words (limit_words.h).
#include "tensor/limit_words.h"

#include <sys/resource.h>
#include <unistd.h>

#include <fstream>

namespace engine {

std::string with_commas(uint64_t n) {
  std::string digits = std::to_string(n);
  for (int at = int(digits.size()) - 3; at > 0; at -= 3) digits.insert(size_t(at), ",");
  return digits;
}

namespace {
// The soft limit on `resource`, or 0 where there is none (or it cannot be read).
uint64_t soft_limit(int resource) {
  rlimit limit{};
  if (getrlimit(resource, &limit) != 0 || limit.rlim_cur == RLIM_INFINITY) return 0;
  return limit.rlim_cur;
}
}  // namespace

std::string file_size_limit_words() {
  const uint64_t limit = soft_limit(RLIMIT_FSIZE);
  return limit ? " (this process may write files of at most " + with_commas(limit) + " bytes: ulimit -f)" : "";
}

std::string address_space_limit_words() {
  const uint64_t limit = soft_limit(RLIMIT_AS);
  if (!limit) return "";
  uint64_t pages = 0;  // the first number of /proc/self/statm: the pages mapped
  std::ifstream("/proc/self/statm") >> pages;
  const std::string mapped =
      pages ? ", and has " + with_commas(pages * uint64_t(sysconf(_SC_PAGESIZE))) + " mapped" : "";
  return " (this process may map at most " + with_commas(limit) + " bytes, ulimit -v" + mapped + ")";
}

}  // namespace engine
