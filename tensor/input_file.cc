// Files given to read, looked at without opening them the blocking way (input_file.h).
#include "tensor/input_file.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

namespace engine {

namespace {
std::string kind(mode_t mode) {
  if (S_ISDIR(mode)) return "a folder";
  if (S_ISFIFO(mode)) return "a named pipe (FIFO)";
  if (S_ISSOCK(mode)) return "a socket";
  if (S_ISCHR(mode) || S_ISBLK(mode)) return "a device";
  return "a special file";
}
std::string kind_words(mode_t mode) { return ": it is " + kind(mode) + ", not a file"; }
}  // namespace

std::string not_a_file(const std::string& path) {
  struct stat st {};
  if (::stat(path.c_str(), &st) != 0) return ": " + std::string(std::strerror(errno));
  if (!S_ISREG(st.st_mode)) return kind_words(st.st_mode);
  // O_NONBLOCK: should the name have become a FIFO since stat, this open still returns.
  const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return ": " + std::string(std::strerror(errno));
  const bool regular = ::fstat(fd, &st) == 0 && S_ISREG(st.st_mode);
  ::close(fd);
  return regular ? "" : kind_words(st.st_mode);
}

std::string special_file_at(const std::string& path) {
  struct stat st {};
  if (::lstat(path.c_str(), &st) != 0 || S_ISREG(st.st_mode) || S_ISLNK(st.st_mode)) return "";
  return kind(st.st_mode);
}

bool anything_at(const std::string& path) {
  struct stat st {};
  return ::stat(path.c_str(), &st) == 0 || errno != ENOENT;
}

}  // namespace engine
