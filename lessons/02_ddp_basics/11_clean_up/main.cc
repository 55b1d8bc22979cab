// Lesson 2, step 11: clean up. destroy_process_group closes the connections, stops the
// group's threads and, on rank 0, the rendezvous server, so the process ends cleanly and
// the port can be used again. This program counts threads and sockets to show it.
//
//   bazel run //lessons/02_ddp_basics:11_clean_up

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <thread>

#include "dist/dist.h"
#include "dist/socket.h"
#include "tensor/parse.h"

using namespace engine;
namespace fs = std::filesystem;

static int threads() {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc/self/task")) n += e.is_directory() ? 1 : 0;
  return n;
}

static int sockets() {
  int n = 0;
  for (auto& e : fs::directory_iterator("/proc/self/fd")) {
    std::error_code ec;
    n += fs::read_symlink(e.path(), ec).string().rfind("socket:", 0) == 0 ? 1 : 0;
  }
  return n;
}

// Can a new server listen on `port` now? (Listener::bind is what rank 0's store uses.)
static bool port_free(int port) {
  try {
    dist::Listener::bind("127.0.0.1", port);
    return true;
  } catch (const Error&) {
    return false;
  }
}

int main() try {
  // A first thread, started and joined before counting: a runtime that starts a helper
  // thread of its own with the first thread (ThreadSanitizer does) has done so by now.
  std::thread([] {}).join();
  const int t0 = threads(), s0 = sockets();
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  dist::barrier();
  const int t1 = threads(), s1 = sockets();
  const char* master_port = std::getenv("MASTER_PORT");  // absent when started with tcp:// or file://
  const int port = master_port ? int(parse_int(master_port, "MASTER_PORT", 0, 65535)) : 0;
  dist::destroy_process_group();  // dist.destroy_process_group()
  const int t2 = threads(), s2 = sockets();
  std::printf("rank %d: threads %d before init, %d in the group, %d after destroy; sockets %d, %d, %d\n", rank, t0, t1,
              t2, s0, s1, s2);
  if (rank == 0 && port > 0)
    std::printf("rank 0: rendezvous port %d free again: %s\n", port, port_free(port) ? "yes" : "no");
  std::printf("rank %d: initialized after destroy: %s\n", rank, dist::is_initialized() ? "yes" : "no");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "11_clean_up: %s\n", e.what());
  return 1;
}
