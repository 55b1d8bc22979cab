// A file made new, never through a link (new_file.h).
#include "tensor/new_file.h"

#include <fcntl.h>
#include <unistd.h>

namespace engine {

int create_new_file(const std::string& path) {
  ::unlink(path.c_str());  // this writer's own leftover, or something put there: not followed
  return ::open(path.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0644);
}

}  // namespace engine
