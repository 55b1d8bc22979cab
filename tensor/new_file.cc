// A file made new, never through a link, and written whole (new_file.h).
#include "tensor/new_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>

#include "tensor/limit_words.h"

namespace engine {

int create_new_file(const std::string& path) {
  ::unlink(path.c_str());  // this writer's own leftover, or something put there: not followed
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

bool write_all(int fd, const void* data, size_t n) {
  const char* p = static_cast<const char*>(data);
  while (n > 0) {
    const ssize_t w = ::write(fd, p, n);
    if (w < 0 && errno == EINTR) continue;
    if (w == 0) errno = ENOSPC;
    if (w <= 0) return false;
    p += w, n -= size_t(w);
  }
  return true;
}

std::string write_error_words(int err) {
  return std::strerror(err) + (err == EFBIG ? file_size_limit_words() : std::string());
}

}  // namespace engine
