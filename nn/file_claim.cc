// One run at a time for a file that a run saves again and again (file_claim.h).
#include "nn/file_claim.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>

#include "tensor/check.h"
#include "tensor/new_file.h"

namespace engine::nn {
namespace {

// "pid 4242 on host node1, since 2026-12-06 12:40:01 UTC".
std::string holder_words() {
  char host[256] = {};
  if (gethostname(host, sizeof host - 1) != 0) std::snprintf(host, sizeof host, "(unknown)");
  char when[64] = "an unknown time";
  const std::time_t now = std::time(nullptr);
  std::tm utc{};
  if (gmtime_r(&now, &utc)) std::strftime(when, sizeof when, "%Y-%m-%d %H:%M:%S UTC", &utc);
  return "pid " + std::to_string(getpid()) + " on host " + host + ", since " + when;
}

// Says who holds the claim now (the lock is ours): the old words go, ours take their place.
// A failure here (a full disk) only leaves the words out of a later refusal.
void write_holder(int fd) {
  const std::string words = holder_words() + "\n";
  if (ftruncate(fd, 0) == 0) {
    [[maybe_unused]] const ssize_t n = pwrite(fd, words.data(), words.size(), 0);
  }
}

std::string read_holder(int fd) {
  char buf[256];
  const ssize_t n = pread(fd, buf, sizeof buf, 0);
  return n > 0 ? claim_holder_text(std::string(buf, size_t(n))) : "";
}

// Whether words a lock file holds may name its holder: not when they name a process of this
// host that has ended (words left by an earlier holder that a later one, with a lock file
// it could only read, another user's, could not replace).
bool may_be_holder(const std::string& words) {
  long pid = 0;
  char host[256] = {}, here[256] = {};
  if (std::sscanf(words.c_str(), "pid %ld on host %255[^,]", &pid, host) != 2 || pid <= 0) return true;
  if (gethostname(here, sizeof here - 1) != 0 || std::strcmp(host, here) != 0) return true;
  return !(::kill(pid_t(pid), 0) != 0 && errno == ESRCH);
}

// flock's answers for a file system that keeps no locks (NFS without its lock service,
// some FUSE file systems), as opposed to a lock another process holds.
bool locks_unsupported(int err) { return err == ENOLCK || err == EOPNOTSUPP || err == ENOSYS || err == EINVAL; }

}  // namespace

std::string claim_holder_text(const std::string& raw) {
  std::string out;
  for (char c : raw) {
    if (c == '\n' || out.size() >= 200) break;
    if (c < 32 || c > 126) return "";  // not words this class wrote
    out += c;
  }
  return out;
}

FileClaim::FileClaim(const std::string& path, const std::string& what) : lock_path_(leave_room(path, 5) + ".lock") {
  // O_NONBLOCK: a FIFO put where the lock file goes must not hang the open (the read-only
  // one, for a lock file another user made, would wait for a writer). O_NOFOLLOW: the
  // holder's words are written into it, and a link put there (to /etc/passwd, in a shared
  // /tmp) must not have its target truncated by a run as root.
  const int flags = O_CLOEXEC | O_NONBLOCK | O_NOFOLLOW;
  int fd = ::open(lock_path_.c_str(), O_RDWR | O_CREAT | flags, 0644);
  if (fd < 0 && errno == EACCES) fd = ::open(lock_path_.c_str(), O_RDONLY | flags);  // another user's
  ENGINE_REQUIRE(fd >= 0 || errno != ELOOP, "[checkpoint] ", lock_path_,
                 " is a symbolic link; it is where the lock for ", path, " (", what,
                 ") goes: remove it or choose another path");
  ENGINE_REQUIRE(fd >= 0, "[checkpoint] cannot open ", lock_path_, ", the lock that keeps other runs from saving to ",
                 path, " (", what, "): ", std::strerror(errno));
  struct stat st {};
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd);
    ENGINE_REQUIRE(false, "[checkpoint] ", lock_path_, " is not a regular file; it is where the lock for ", path, " (",
                   what, ") goes: remove it or choose another path");
  }
  int rc;
  while ((rc = flock(fd, LOCK_EX | LOCK_NB)) != 0 && errno == EINTR) {}
  if (rc == 0) {
    fd_ = fd;
    write_holder(fd_);
    return;
  }
  const int err = errno;
  if (locks_unsupported(err)) {
    ::close(fd);
    std::fprintf(stderr,
                 "[checkpoint] warning: cannot lock %s (%s): this file system keeps no locks, so another run saving "
                 "to %s would not be noticed\n",
                 lock_path_.c_str(), std::strerror(err), path.c_str());
    return;
  }
  std::string holder = err == EWOULDBLOCK ? read_holder(fd) : "";
  if (!may_be_holder(holder)) holder.clear();
  ::close(fd);
  ENGINE_REQUIRE(err != EWOULDBLOCK, "[checkpoint] another run is saving to ", path, " (", what, "): its lock, ",
                 lock_path_, ", is held by ", holder.empty() ? "a process that has not yet said which" : holder,
                 ". Two runs saving to one file overwrite each other's saves, and one resumed would take up the "
                 "other's progress: give this run its own path, or wait for that run to end");
  ENGINE_REQUIRE(false, "[checkpoint] cannot lock ", lock_path_, " for ", path, " (", what, "): ", std::strerror(err));
}

FileClaim::~FileClaim() {
  if (fd_ >= 0) ::close(fd_);  // closing lets go of the lock; the file stays for the next run
}

}  // namespace engine::nn
