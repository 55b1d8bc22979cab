// A file made new, never through a link, and written whole (new_file.h).
#include "tensor/new_file.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>

#include "tensor/limit_words.h"

namespace engine {

std::string leave_room(const std::string& path, size_t room) {
  constexpr size_t kNameMax = 255;  // NAME_MAX on Linux's file systems
  const size_t slash = path.rfind('/');
  const size_t start = slash == std::string::npos ? 0 : slash + 1;
  const size_t name = path.size() - start;
  if (name + room <= kNameMax) return path;
  uint32_t h = 2166136261u;  // FNV-1a over the whole name
  for (size_t i = start; i < path.size(); ++i) h = (h ^ uint8_t(path[i])) * 16777619u;
  char tail[16];
  std::snprintf(tail, sizeof tail, "~%08x", h);
  size_t keep = kNameMax > room + 9 ? kNameMax - room - 9 : 0;
  while (keep > 0 && (uint8_t(path[start + keep]) & 0xC0) == 0x80) --keep;  // not inside a UTF-8 character
  return path.substr(0, start + keep) + tail;
}

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
