// A file made new under a name another process may have put something at first: the
// temporary a save writes and then renames into place. Its name is predictable (the target
// plus the writer's pid), and its folder may be shared (NFS, a project folder a group can
// write), so whatever is there is removed first (unlink removes a link, not its target),
// and the file is then created exclusively, never opened through a link: a link put there
// would otherwise have had its target (any file the writer may write, all of them for
// root) truncated and overwritten.
//
//   const int fd = engine::create_new_file(path + ".tmp." + std::to_string(getpid()));
//   if (fd < 0) ... errno says why (EEXIST: something was put back there meanwhile)
//   if (!engine::write_all(fd, bytes.data(), bytes.size()))
//     ... engine::write_error_words(errno) says why
#pragma once

#include <cstddef>
#include <string>

namespace engine {

// An fd open for writing on a new, empty regular file at `path` (close-on-exec), or -1
// with errno set.
int create_new_file(const std::string& path);

// Writes all n bytes to fd, however many calls it takes (a write may take part, or be
// interrupted); false with errno set when one fails (ENOSPC where one wrote nothing).
bool write_all(int fd, const void* data, size_t n);

// Why a write failed, in words: strerror(err), and for EFBIG the limit it met, e.g. "File
// too large (this process may write files of at most 1,024,000 bytes: ulimit -f)".
std::string write_error_words(int err);

}  // namespace engine
