// The limit on open files (ulimit -n, RLIMIT_NOFILE) for jobs of many ranks. Each rank of
// the CPU backend keeps a connection to every other rank, and rank 0 one more per rank for
// the rendezvous store: 512 ranks need over 1,000 files on rank 0, past the soft limit many
// systems start with (1024). The soft limit is raised as far as the hard limit allows, as
// servers do; beyond it the job stops at once, naming the limit, instead of failing later
// in accept() or socket().
//
//   raise_open_files(3 * world_size);  // room for every connection, if the hard limit allows
//   reserve_open_files(world_size - 1 + 16, "rank 0 (a connection to each other rank)");
//   Socket s = listener.accept(d);  // throws OutOfFiles, naming the limit, if none is left
#pragma once

#include <cstdint>
#include <string>

#include "tensor/check.h"

namespace engine::dist {

// socket() or accept() found no file descriptor left (EMFILE, ENFILE): the message names
// the limit. Callers tell it apart from a peer that went away.
class OutOfFiles : public Error {
 public:
  using Error::Error;
};

// Files this process has open now (the entries of /proc/self/fd); -1 if it cannot tell.
int64_t open_files();

// " (this process has as many files open as it may, M: ulimit -n)" for EMFILE, the
// machine's limit for ENFILE, "" for any other errno.
std::string open_files_note(int err);

// Makes room for `more` files beyond those open now, raising the soft limit toward the hard
// one when needed. False when the hard limit is too low (or the limit cannot be read).
bool raise_open_files(int64_t more);

// The same, but throws, naming both limits and `why`, when the hard limit is too low.
void reserve_open_files(int64_t more, const std::string& why);

}  // namespace engine::dist
