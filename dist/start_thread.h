// Starts the runtime's background threads (the store's, the collective worker, the
// watchdog) and turns a failure into an error that says which thread and the likely limit,
// instead of a bare "Resource temporarily unavailable" (or, off the main thread, an abort).
//   worker_ = start_thread("the collective worker", [this] { worker_loop(); });
#pragma once

#include <pthread.h>

#include <mutex>
#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "tensor/check.h"

namespace engine::dist {

// A new thread's stack is, unless told otherwise, as large as the stack limit (ulimit -s),
// reserved whole when the thread starts. Where that limit is huge (some clusters set tens
// of GiB, or more, for programs with deep recursion) no thread could be started at all: the
// kernel will not reserve more than the machine's memory for one mapping, and the error
// said only "Resource temporarily unavailable". These threads need a few KiB, so past
// 256 MiB the default for threads started from then on is set to 8 MiB, glibc's usual (the
// main thread keeps its limit). Returns the default in bytes.
inline size_t thread_stack_default() {
  static std::once_flag once;
  std::call_once(once, [] {
    pthread_attr_t attr;
    size_t bytes = 0;
    if (pthread_getattr_default_np(&attr) != 0) return;
    if (pthread_attr_getstacksize(&attr, &bytes) == 0 && bytes > (size_t(256) << 20) &&
        pthread_attr_setstacksize(&attr, size_t(8) << 20) == 0)
      pthread_setattr_default_np(&attr);
    pthread_attr_destroy(&attr);
  });
  pthread_attr_t attr;
  size_t bytes = 0;
  if (pthread_getattr_default_np(&attr) == 0) {
    pthread_attr_getstacksize(&attr, &bytes);
    pthread_attr_destroy(&attr);
  }
  return bytes;
}

template <class F>
std::thread start_thread(const std::string& what, F&& body) {
  const size_t stack = thread_stack_default();
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    throw Error("[dist] cannot start " + what + "'s thread: " + e.what() +
                " (the limit on processes and threads: ulimit -u, or the container's pids.max; or memory for its " +
                std::to_string(stack >> 20) + " MiB stack)");
  }
}

}  // namespace engine::dist
