// Starts the runtime's background threads (the store's, the collective worker, the
// watchdog) and turns a failure into an error that says which thread and the likely limit,
// instead of a bare "Resource temporarily unavailable" (or, off the main thread, an abort).
//   worker_ = start_thread("the collective worker", [this] { worker_loop(); });
#pragma once

#include <string>
#include <system_error>
#include <thread>
#include <utility>

#include "tensor/check.h"

namespace engine::dist {

template <class F>
std::thread start_thread(const std::string& what, F&& body) {
  try {
    return std::thread(std::forward<F>(body));
  } catch (const std::system_error& e) {
    throw Error("[dist] cannot start " + what + "'s thread: " + e.what() +
                " (the limit on processes and threads: ulimit -u, or the container's pids.max)");
  }
}

}  // namespace engine::dist
