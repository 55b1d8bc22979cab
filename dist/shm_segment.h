// Shared-memory segments, as the shared-memory all-reduce makes them (private to dist/):
// a name no other job uses, the name removed on every path out, the pages reserved up
// front (a tmpfs without room is otherwise a SIGBUS at the first write), and words for a
// /dev/shm that has no room.
//   UnlinkOnExit unlink{unique_shm_name(tag, "buf")};
//   int fd = shm_open(unlink.name.c_str(), O_CREAT | O_EXCL | O_RDWR, 0600);
//   if (int err = size_segment(fd, bytes)) warn(shm_room(), shm_advice(err));
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <string>

namespace engine::dist {

// "/engine-<tag>-<kind>-<pid>-<counter>-<random>": unique across jobs and pid namespaces.
std::string unique_shm_name(const std::string& tag, const char* kind);

// Removes a segment's name when it goes out of scope: on success after every rank has
// mapped it (the memory lives on until the last unmap), and on every failure path, so no
// error, timeout or exception leaves a name in /dev/shm. Every rank that learned the name
// unlinks it; all but the first find it gone, which is fine.
struct UnlinkOnExit {
  std::string name;
  ~UnlinkOnExit() {
    if (!name.empty()) shm_unlink(name.c_str());
  }
};

// Sizes a new segment and reserves its pages; returns 0 or the errno.
int size_segment(int fd, size_t bytes);
// A size in words: "512 KiB", "4.0 MiB".
std::string size_words(double bytes);
// "/dev/shm has 1.0 MiB free of 5.0 MiB".
std::string shm_room();
// What to do about a failed reservation: room, or a writable /dev/shm.
const char* shm_advice(int err);

}  // namespace engine::dist
