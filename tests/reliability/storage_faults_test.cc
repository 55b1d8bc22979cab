// The rest of the fault matrix (docs/RELIABILITY.md): the disk fills up, or the folder is
// read-only, at checkpoint time; a folder other machines write into too (NFS); the
// dataset is missing or corrupt. Each is an error that
// names the file, and no checkpoint is ever half-written: the previous one stays whole.
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cctype>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>

#include "catch2/catch.hpp"
#include "data/fashion_mnist.h"
#include "data/idx.h"
#include "data/image.h"
#include "nn/file_claim.h"
#include "nn/safetensors.h"
#include "tensor/new_file.h"
#include "tensor/ops.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::nn;
namespace fs = std::filesystem;

namespace {

int temporaries_of(const std::string& path) {
  int n = 0;
  const std::string prefix = fs::path(path).filename().string() + ".tmp.";
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    n += e.path().filename().string().rfind(prefix, 0) == 0;
  return n;
}

// The text of the Error `f` throws, run in a child process: a limit it sets stays there,
// and a wait it begins is cut after 5 s ("blocked"; opening a named pipe for reading the
// plain way waits for a writer, for good). "no error" where f returns.
std::string error_within_5s(const std::function<void()>& f) {
  int p[2];
  REQUIRE(pipe(p) == 0);
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    alarm(5);
    std::string what = "no error";
    try {
      f();
    } catch (const Error& e) {
      what = e.what();
    }
    (void)!write(p[1], what.data(), what.size());
    _exit(0);
  }
  close(p[1]);
  std::string what;
  char buf[1024];
  ssize_t n;
  while ((n = read(p[0], buf, sizeof buf)) > 0) what.append(buf, size_t(n));
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  return WIFSIGNALED(status) ? "blocked" : what;
}

}  // namespace

TEST_CASE("a full disk at checkpoint time: an error, and the previous checkpoint stays whole") {
  const std::string path = tmp_path("full_disk.safetensors");
  save_safetensors(path, {{"step", full({1}, 1.0)}});
  // A child whose files may not grow past 64 KiB: its writes fail as on a full disk
  // (EFBIG rather than ENOSPC, through the same path in the writer). No SIGXFSZ handling
  // here: every program ignores it from its start (tensor/program_start.h), so the write
  // fails instead of killing the process.
  const std::string what = error_within_5s([&] {
    rlimit limit{64 << 10, 64 << 10};
    setrlimit(RLIMIT_FSIZE, &limit);
    save_safetensors(path, {{"step", full({1}, 2.0)}, {"big", zeros({1 << 20})}});
  });
  CHECK_THAT(what, Catch::Contains("[save_safetensors] writing") &&
                       Catch::Contains("failed: File too large (this process may write files of at most 65,536 "
                                       "bytes: ulimit -f); ") &&
                       Catch::Contains(path + " was left as it was"));
  CHECK(load_safetensors(path).at("step").item() == 1.0);  // the previous one, whole
  CHECK(temporaries_of(path) == 0);
}

// The name a writer gives its temporary, as safetensors.cc makes it: "<path>.tmp.HOST-NS.PID"
// (HOST: the machine's name, letters and digits; NS: its pid namespace's number).
std::string temporary_of(const std::string& path, const std::string& host, long pid) {
  char ns[64] = {};
  REQUIRE(readlink("/proc/self/ns/pid", ns, sizeof ns - 1) > 0);
  std::string digits;
  for (const char* c = ns; *c; ++c)
    if (std::isdigit(static_cast<unsigned char>(*c))) digits += *c;
  return path + ".tmp." + host + "-" + digits + "." + std::to_string(pid);
}

// This machine's name as a writer's tag holds it: 32 characters at most, letters and digits.
std::string writer_host() {
  char name[256] = {};
  gethostname(name, sizeof name - 1);
  std::string host;
  for (const char* c = name; *c && host.size() < 32; ++c)
    host += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '-';
  return host;
}

TEST_CASE("a folder other machines save into too: their temporaries are not this machine's to judge") {
  // A checkpoint folder on NFS, written by jobs on two machines. Their writers' pids mean
  // nothing here, and may be this writer's own: another machine's temporary, mid-save, was
  // removed as "left by a dead writer", or truncated by a writer here with the same pid.
  const std::string path = tmp_path("shared_folder.safetensors");
  const std::string host = writer_host();
  const pid_t gone = fork();  // a pid that no process here has now
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const std::string theirs = temporary_of(path, "elsewhere", gone),
                    same_pid = temporary_of(path, "elsewhere", getpid());
  const std::string ours_left = temporary_of(path, host, gone);  // a writer here, killed mid-save
  for (const std::string& f : {theirs, same_pid, ours_left}) std::ofstream(f) << "another writer's bytes";
  save_safetensors(path, {{"step", full({1}, 3.0)}});
  REQUIRE(load_safetensors(path).at("step").item() == 3.0);
  auto text = [](const std::string& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
  };
  CHECK(text(theirs) == "another writer's bytes");    // left alone
  CHECK(text(same_pid) == "another writer's bytes");  // not truncated
  CHECK(!fs::exists(ours_left));                      // this machine's dead writer's: cleared away
  fs::remove(theirs), fs::remove(same_pid);
}

TEST_CASE("a link put where a save writes its temporary is not written through") {
  // The temporary's name is predictable (this machine, this pid): in a folder others may
  // write, a link there pointed the save at any file the saving process may write.
  const std::string path = tmp_path("linked_tmp.safetensors"), target = tmp_path("linked_tmp_target");
  const std::string host = writer_host();
  std::ofstream(target) << "precious";
  const std::string tmp = temporary_of(path, host, getpid());
  fs::remove(tmp);
  fs::create_symlink(target, tmp);
  save_safetensors(path, {{"step", full({1}, 4.0)}});
  REQUIRE(load_safetensors(path).at("step").item() == 4.0);
  std::ifstream in(target);
  REQUIRE(std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()) == "precious");
  REQUIRE(!fs::exists(fs::symlink_status(tmp)));
}

TEST_CASE("a read-only or missing folder at checkpoint time is an error naming the path") {
  // /proc refuses new files even to root (a permission bit would not stop root): root is
  // refused at the create, any other user already by the folder's permissions.
  REQUIRE_THROWS_WITH(save_safetensors("/proc/engine_ckpt.safetensors", {{"v", zeros({4})}}),
                      Catch::Contains("cannot create /proc/engine_ckpt.safetensors.tmp.") ||
                          Catch::Contains("cannot save to /proc/engine_ckpt.safetensors: the folder /proc is not "
                                          "writable (Permission denied)"));
  REQUIRE_THROWS_WITH(save_safetensors(tmp_path("no/such/folder/ckpt.safetensors"), {{"v", zeros({4})}}),
                      Catch::Contains("no/such/folder/ckpt.safetensors"));
}

TEST_CASE("a missing or corrupt dataset file is an error naming the file") {
  const std::string dir = tmp_path("fmnist_corrupt");
  fs::create_directories(dir);
  const std::string images = dir + "/t10k-images-idx3-ubyte.gz", labels = dir + "/t10k-labels-idx1-ubyte.gz";
  REQUIRE_THROWS_WITH(data::fashion_mnist(false, {.root = dir}),
                      Catch::Contains("t10k-images-idx3-ubyte.gz not found in " + dir));
  // Truncated gzip, then a valid gzip of garbage.
  std::ofstream(images, std::ios::binary) << std::string("\x1f\x8b\x08\x00\x00\x00", 6);
  std::ofstream(labels, std::ios::binary) << std::string("\x1f\x8b\x08\x00\x00\x00", 6);
  REQUIRE_THROWS_WITH(data::fashion_mnist(false, {.root = dir}), Catch::Contains(images));
}

TEST_CASE("a named pipe, a device or a folder given to read is refused by name, at once") {
  // A FIFO where a checkpoint, a dataset file or an image should be (a name reused, a shell's
  // <(...) passed as a path): each reader waited for a writer, for good, and SIGTERM could
  // not stop the wait.
  const std::string fifo = tmp_path("a_fifo");
  fs::remove(fifo);
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  CHECK_THAT(error_within_5s([&] { load_safetensors(fifo); }),
             Catch::Contains("[load_safetensors] cannot read " + fifo + ": it is a named pipe (FIFO), not a file"));
  CHECK_THAT(error_within_5s([&] { data::load_image(fifo); }),
             Catch::Contains("[load_image] cannot read " + fifo + ": it is a named pipe (FIFO), not a file"));
  CHECK_THAT(error_within_5s([&] { data::read_idx_bytes(fifo); }),
             Catch::Contains("[idx] cannot read " + fifo + ": it is a named pipe (FIFO), not a file"));
  const std::string dir = tmp_path("fmnist_fifo");
  fs::create_directories(dir);
  fs::remove(dir + "/t10k-images-idx3-ubyte.gz");
  REQUIRE(mkfifo((dir + "/t10k-images-idx3-ubyte.gz").c_str(), 0644) == 0);
  CHECK_THAT(error_within_5s([&] { data::fashion_mnist(false, {.root = dir}); }),
             Catch::Contains("[FashionMNIST] cannot read " + dir +
                             "/t10k-images-idx3-ubyte.gz: it is a named pipe (FIFO), not a file"));
  // A device never ends (/dev/zero) or holds nothing (/dev/null); a folder has no bytes.
  CHECK_THAT(error_within_5s([] { load_safetensors("/dev/zero"); }),
             Catch::Contains("cannot read /dev/zero: it is a device, not a file"));
  CHECK_THAT(error_within_5s([] { data::load_image("/dev/zero"); }),
             Catch::Contains("cannot read /dev/zero: it is a device, not a file"));
  CHECK_THAT(error_within_5s([&] { load_safetensors(dir); }),
             Catch::Contains("cannot read " + dir + ": it is a folder, not a file"));
}

TEST_CASE(
    "a file name as long as the file system takes is saved and claimed: the temporary's and lock's names are cut") {
  // 255 bytes, the most a folder entry holds. "NAME.tmp.HOST-NS.PID" and "NAME.lock" would
  // not fit: the first save, after an epoch of training, failed with "File name too long".
  const std::string path = tmp_path(std::string(255 - 12, 'c') + ".safetensors");
  save_safetensors(path, {{"step", full({1}, 5.0)}});
  CHECK(load_safetensors(path).at("step").item() == 5.0);
  int others = 0;  // nothing left beside it
  for (const auto& e : fs::directory_iterator(fs::path(path).parent_path()))
    others += e.path().filename().string().rfind(std::string(100, 'c'), 0) == 0 && e.path() != path;
  CHECK(others == 0);
  // A temporary a killed writer of this machine left there, under the cut name, is cleared.
  const pid_t gone = fork();
  if (gone == 0) _exit(0);
  waitpid(gone, nullptr, 0);
  const std::string host = writer_host();
  const std::string suffix = temporary_of("", host, 0);                       // ".tmp.HOST-NS.0"
  const std::string stem = engine::leave_room(path, suffix.size() - 1 + 10);  // room for a 10-digit pid
  const std::string left = temporary_of(stem, host, gone);
  std::ofstream(left) << "a killed writer's bytes";
  REQUIRE(fs::exists(left));
  save_safetensors(path, {{"step", full({1}, 6.0)}});
  CHECK(!fs::exists(left));
  CHECK(load_safetensors(path).at("step").item() == 6.0);
  FileClaim claim(path, "the checkpoint");
  CHECK(claim.lock_path().size() - fs::path(claim.lock_path()).parent_path().string().size() - 1 <= 255);
}
