// Catch2's main(), compiled once for every test binary.
#define CATCH_CONFIG_MAIN
#include <thread>

#include "catch2/catch.hpp"

namespace engine::testing {

// Static initialisation runs on the main thread, before any test starts a thread.
static const std::thread::id kMainThread = std::this_thread::get_id();

bool on_main_thread() { return std::this_thread::get_id() == kMainThread; }

}  // namespace engine::testing
