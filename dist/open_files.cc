// The open-file limit for jobs of many ranks (open_files.h).
#include "dist/open_files.h"

#include <dirent.h>
#include <sys/resource.h>

#include <cerrno>

namespace engine::dist {

int64_t open_files() {
  DIR* d = ::opendir("/proc/self/fd");
  if (!d) return -1;
  int64_t n = 0;
  while (const dirent* e = ::readdir(d))
    if (e->d_name[0] != '.') ++n;
  ::closedir(d);
  return n - 1;  // the directory stream's own descriptor
}

namespace {
std::string limit_text(rlim_t v) { return v == RLIM_INFINITY ? "unlimited" : std::to_string(v); }
}  // namespace

std::string open_files_note(int err) {
  if (err == ENFILE) return " (the machine's limit on open files, fs.file-max, is reached)";
  rlimit l{};
  if (err != EMFILE || ::getrlimit(RLIMIT_NOFILE, &l) != 0) return "";
  return " (this process has as many files open as it may, " + limit_text(l.rlim_cur) + ": ulimit -n)";
}

bool raise_open_files(int64_t more) {
  rlimit l{};
  const int64_t open = open_files();
  if (open < 0 || ::getrlimit(RLIMIT_NOFILE, &l) != 0) return false;
  const int64_t needed = open + more;
  if (l.rlim_cur == RLIM_INFINITY || int64_t(l.rlim_cur) >= needed) return true;
  if (l.rlim_max != RLIM_INFINITY && int64_t(l.rlim_max) < needed) return false;
  l.rlim_cur = rlim_t(needed);
  return ::setrlimit(RLIMIT_NOFILE, &l) == 0;
}

void reserve_open_files(int64_t more, const std::string& why) {
  if (raise_open_files(more)) return;
  rlimit l{};
  const int64_t open = open_files();
  if (open < 0 || ::getrlimit(RLIMIT_NOFILE, &l) != 0) return;  // cannot tell: the calls themselves will say
  const std::string needed = std::to_string(open + more);
  throw Error(why + " needs about " + needed + " open files (" + std::to_string(open) + " open now and " +
              std::to_string(more) + " more), but this process may open " + limit_text(l.rlim_cur) +
              " (ulimit -n) and cannot raise that past its hard limit, " + limit_text(l.rlim_max) +
              ": raise both (ulimit -n " + needed + " in the shell that starts the job, as root; nofile in " +
              "/etc/security/limits.conf; docker run --ulimit nofile=" + needed + ":" + needed +
              "; LimitNOFILE= for a systemd service)");
}

}  // namespace engine::dist
