// Shared-memory segments: their names, their pages, the machine they can be shared on,
// and the words for /dev/shm when it has no room (shm_segment.h).
#include "dist/shm_segment.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fstream>

#include "dist/shm_allreduce.h"

namespace engine::dist {

// A name no other job uses: the pid alone is not enough, because processes in different
// PID namespaces (containers, sandboxes) can share /dev/shm and the same small pids. The
// job's tag comes first, so the launcher can sweep what a killed job left (shm_job_tag).
std::string unique_shm_name(const std::string& tag, const char* kind) {
  unsigned char r[8] = {};
  if (FILE* f = std::fopen("/dev/urandom", "rb")) {
    if (std::fread(r, 1, sizeof r, f) != sizeof r) std::memset(r, 0, sizeof r);
    std::fclose(f);
  }
  static std::atomic<unsigned> counter{0};
  char buf[128];
  std::snprintf(buf, sizeof buf, "/engine-%s-%s-%d-%u-%02x%02x%02x%02x%02x%02x%02x%02x", tag.c_str(), kind,
                int(getpid()), counter++, r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  return buf;
}

// Sizes a new segment and reserves its pages. /dev/shm is a tmpfs: a page it has no room
// for is not an error at ftruncate or mmap but a SIGBUS at the first write to it (Docker
// gives a container 64 MB by default). Reserved here, a full /dev/shm is an error code.
// Returns 0 or the errno.
int size_segment(int fd, size_t bytes) {
  if (ftruncate(fd, off_t(bytes)) != 0) return errno;
  int err;
  while ((err = posix_fallocate(fd, 0, off_t(bytes))) == EINTR) {}
  return err;
}

// A size in words: "512 KiB", "4.0 MiB".
std::string size_words(double bytes) {
  char buf[32];
  if (bytes < (1 << 20))
    std::snprintf(buf, sizeof buf, "%.0f KiB", bytes / 1024);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", bytes / (1 << 20));
  return buf;
}

// "/dev/shm has 1.0 MiB free of 5.0 MiB", for the messages after a failed reservation.
std::string shm_room() {
  struct statvfs v {};
  if (statvfs("/dev/shm", &v) != 0) return "/dev/shm cannot be read";
  return "/dev/shm has " + size_words(double(v.f_bavail) * double(v.f_frsize)) + " free of " +
         size_words(double(v.f_blocks) * double(v.f_frsize));
}

// What to do about it: room, or a /dev/shm that can be written at all.
const char* shm_advice(int err) {
  return err == ENOSPC ? "Enlarge /dev/shm (docker run --shm-size=1g)" : "Make /dev/shm a writable tmpfs";
}

std::string machine_id() {
  char host[256] = {};
  gethostname(host, sizeof host - 1);
  std::ifstream boot("/proc/sys/kernel/random/boot_id");
  std::string id;
  std::getline(boot, id);
  // Containers on one host can share its name and boot id (Kubernetes pods with
  // hostNetwork do) yet each see their own pids and their own /dev/shm: then neither the
  // segments nor the pid checks of the shared-memory path reach across. Ranks count as one
  // machine only where both are the same.
  char pid_ns[64] = {};
  (void)!readlink("/proc/self/ns/pid", pid_ns, sizeof pid_ns - 1);
  struct stat shm {};
  const bool has_shm = stat("/dev/shm", &shm) == 0;
  return std::string(host) + "/" + id + "/" + pid_ns +
         "/shm:" + (has_shm ? std::to_string(shm.st_dev) + ":" + std::to_string(shm.st_ino) : "none");
}

std::string shm_job_tag(const std::string& token) {
  uint64_t h = 1469598103934665603ull;  // FNV-1a: a short tag that does not reveal the token
  for (unsigned char c : token) h = (h ^ c) * 1099511628211ull;
  char buf[17];
  std::snprintf(buf, sizeof buf, "%016llx", (unsigned long long)h);
  return std::string(buf, 8);
}

}  // namespace engine::dist
