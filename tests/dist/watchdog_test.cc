// The watchdog that bounds collectives the host does not wait for (the nccl backend's):
// here with stand-ins for "has this collective finished" and "abort", so it runs without a GPU.
#include "dist/watchdog.h"

#include <atomic>
#include <thread>

#include "catch2/catch.hpp"

using namespace engine::dist;
using namespace std::chrono_literals;

TEST_CASE("a collective that never finishes is aborted at its deadline, named in the CPU backend's words") {
  std::atomic<int> aborts{0};
  std::string said;
  Watchdog dog(
      1, 1s, [&](const std::string& why) { said = why, ++aborts; }, [] { return std::string(); }, 5ms);
  std::atomic<bool> first_done{false};
  dog.watch("all_reduce(SUM, 4 x float32) #0", [&] { return first_done.load(); });
  dog.watch("broadcast(root 0, 4 x float32) #1", [] { return false; });  // a peer never joins this one
  first_done = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (dog.error().empty() && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(5ms);
  const auto waited = std::chrono::steady_clock::now() - t0;
  CHECK(waited >= 900ms);
  CHECK(waited < 3s);
  CHECK(aborts == 1);
  CHECK(dog.error() == said);
  CHECK_THAT(dog.error(), Catch::Contains("[dist] timed out after 1 s in broadcast(root 0, 4 x float32) #1 on rank 1 "
                                          "(nccl)") &&
                              Catch::Contains("communicator was aborted"));
  CHECK(dog.in_flight() == 0);
  dog.watch("all_reduce(SUM, 4 x float32) #2", [] { return false; });  // after an abort nothing more is watched
  std::this_thread::sleep_for(50ms);
  CHECK(aborts == 1);
}

TEST_CASE("collectives that finish in time are forgotten and nothing is aborted") {
  std::atomic<int> aborts{0};
  Watchdog dog(
      0, 1s, [&](const std::string&) { ++aborts; }, [] { return std::string(); }, 2ms);
  for (int i = 0; i < 100; ++i) {
    auto finished = std::make_shared<std::atomic<bool>>(false);
    dog.watch("all_reduce #" + std::to_string(i), [finished] { return finished->load(); });
    *finished = true;
  }
  const auto t0 = std::chrono::steady_clock::now();
  while (dog.in_flight() > 0 && std::chrono::steady_clock::now() - t0 < 2s) std::this_thread::sleep_for(2ms);
  CHECK(dog.in_flight() == 0);
  std::this_thread::sleep_for(1200ms);  // past every deadline
  CHECK(aborts == 0);
  CHECK(dog.error().empty());
}

TEST_CASE("an error the backend reports on its own (a failed peer) aborts at once") {
  std::atomic<bool> peer_failed{false};
  std::atomic<int> aborts{0};
  Watchdog dog(
      0, 60s, [&](const std::string&) { ++aborts; },
      [&] { return peer_failed ? std::string("remote process exited or there was a network error") : ""; }, 2ms);
  dog.watch("all_gather(16 x float32) #5", [] { return false; });
  peer_failed = true;
  const auto t0 = std::chrono::steady_clock::now();
  while (dog.error().empty() && std::chrono::steady_clock::now() - t0 < 5s) std::this_thread::sleep_for(2ms);
  CHECK(std::chrono::steady_clock::now() - t0 < 1s);  // not the 60 s timeout
  CHECK(aborts == 1);
  CHECK_THAT(dog.error(), Catch::Contains("remote process exited") && Catch::Contains("all_gather(16 x float32) #5"));
}
