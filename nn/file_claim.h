// One run at a time for a file that a run saves again and again (a training state, a
// checkpoint written every epoch). Two runs given the same path (a demo started twice in
// one folder, two jobs sharing a default) would each overwrite the other's saves, and a
// run that then resumed would take up the other run's progress, silently. The first run
// claims the file; a second is refused at its start, naming the run that holds it.
//
//   nn::FileClaim claim("out/state.safetensors", "the training state (--state)");
//   ...                                   // train and save; the claim lasts as long as `claim`
//
// The claim is a lock (flock) on PATH.lock (a name too long for that is cut short,
// new_file.h: leave_room), which also says who holds it ("pid 4242 on host node1, since
// 2026-12-06 12:40:01 UTC"). The kernel lets go of it when the process
// ends in any way (killed included), so a job restarted after a failure claims the file
// again at once; the .lock file itself stays, like leveldb's LOCK. On a file system that
// keeps no locks the claim says so on stderr and the run goes on unclaimed.
#pragma once

#include <string>

namespace engine::nn {

class FileClaim {
 public:
  // Claims `path` for this process; throws, naming the holder, when another holds it.
  // `what` says what the file is, with the flag that chooses it, for the message.
  FileClaim(const std::string& path, const std::string& what);
  ~FileClaim();
  FileClaim(const FileClaim&) = delete;
  FileClaim& operator=(const FileClaim&) = delete;

  const std::string& lock_path() const { return lock_path_; }
  bool held() const { return fd_ >= 0; }  // false where the file system keeps no locks

 private:
  std::string lock_path_;
  int fd_ = -1;
};

// What a lock file says about its holder, made safe to print: at most 200 bytes,
// printable ASCII only, one line. "" when it says nothing readable.
std::string claim_holder_text(const std::string& raw);

}  // namespace engine::nn
