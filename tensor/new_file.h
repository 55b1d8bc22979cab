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
//
// A file's temporary and its lock are named after it, longer: a name the file system takes
// (up to 255 bytes) may leave no room for ".tmp.HOST-NS.PID", and the first save, after an
// epoch of training, failed with "File name too long". leave_room cuts such a name short:
//
//   const std::string tmp = engine::leave_room(path, 60) + ".tmp." + tag + "." + pid;
#pragma once

#include <cstddef>
#include <string>

namespace engine {

// `path`, or where its last part (the file's own name) plus `room` more bytes would not fit
// in one folder entry (255 bytes), that name cut short, ending in "~" and 8 hex digits of a
// hash of the whole name: names that differ stay apart, and one name always gives one cut.
std::string leave_room(const std::string& path, size_t room);

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
