// The watchdog of a backend whose collectives run asynchronously on a device (NCCL): the
// host queues a collective and moves on, so no host call is there to time out when a peer
// never joins. The watchdog's thread does it instead: each collective is registered with
// a way to ask whether it has finished; one still running at its deadline, or an error
// the backend reports on its own (a peer that failed), makes the watchdog call `abort`
// once, with the message the CPU backend would give, and remember it for error().
//
//   Watchdog dog(rank, timeout, [&](const std::string& why) { ncclCommAbort(comm); },
//                [&] { return async_error_text(comm); });
//   dog.watch("all_reduce(SUM, 1024 x float32) #3", [=] { return cudaEventQuery(e) == cudaSuccess; });
//   if (!dog.error().empty()) throw Error(dog.error());   // before the next collective
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "dist/stop_clock.h"

namespace engine::dist {

class Watchdog {
 public:
  // abort: ends every collective in flight (called once, on the watchdog's thread).
  // async_error: "" while all is well, else what went wrong (checked while work is in flight).
  Watchdog(int rank, std::chrono::milliseconds timeout, std::function<void(const std::string&)> abort,
           std::function<std::string()> async_error, std::chrono::milliseconds poll = std::chrono::milliseconds(10));
  ~Watchdog();
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Watches one collective, described as "all_reduce(SUM, 1024 x float32) #3".
  void watch(const std::string& description, std::function<bool()> done);
  // "" until the watchdog aborted; then why.
  std::string error() const;
  size_t in_flight() const;

 private:
  struct Entry {
    std::string description;
    std::function<bool()> done;
    Clock::time_point deadline;  // stop_clock.h: a job stopped and continued is not overdue
  };
  void loop();
  void fail(const std::string& why);  // with mu_ held

  const int rank_;
  const std::chrono::milliseconds timeout_, poll_;
  std::function<void(const std::string&)> abort_;
  std::function<std::string()> async_error_;
  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Entry> entries_;  // in the order they were queued, which is the order they finish
  std::string error_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace engine::dist
