#include "dist/watchdog.h"

#include "dist/start_thread.h"

namespace engine::dist {

Watchdog::Watchdog(int rank, std::chrono::milliseconds timeout, std::function<void(const std::string&)> abort,
                   std::function<std::string()> async_error, std::chrono::milliseconds poll)
    : rank_(rank), timeout_(timeout), poll_(poll), abort_(std::move(abort)), async_error_(std::move(async_error)) {
  thread_ = start_thread("the watchdog", [this] { loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::watch(const std::string& description, std::function<bool()> done) {
  std::lock_guard<std::mutex> lock(mu_);
  if (!error_.empty()) return;  // already aborted: nothing will run
  entries_.push_back({description, std::move(done), Clock::now() + timeout_});
  cv_.notify_all();
}

std::string Watchdog::error() const {
  std::lock_guard<std::mutex> lock(mu_);
  return error_;
}

size_t Watchdog::in_flight() const {
  std::lock_guard<std::mutex> lock(mu_);
  return entries_.size();
}

void Watchdog::fail(const std::string& why) {
  error_ = why;
  entries_.clear();
  abort_(why);
}

void Watchdog::loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!stop_) {
    if (entries_.empty() || !error_.empty()) {
      cv_.wait(lock, [&] { return stop_ || (!entries_.empty() && error_.empty()); });
      continue;
    }
    // Collectives on one stream finish in order: only the oldest can be overdue first.
    while (!entries_.empty() && entries_.front().done()) entries_.pop_front();
    if (!entries_.empty()) {
      if (std::string e = async_error_(); !e.empty()) {
        fail("[dist] " + e + " in " + entries_.front().description + " on rank " + std::to_string(rank_) +
             " (nccl): a peer failed or the connection broke");
      } else if (Clock::now() > entries_.front().deadline) {
        fail("[dist] timed out after " + std::to_string(timeout_.count() / 1000) + " s in " +
             entries_.front().description + " on rank " + std::to_string(rank_) +
             " (nccl): another rank may be stuck, still computing, or in a different collective; the communicator "
             "was aborted");
      }
    }
    cv_.wait_for(lock, poll_);
  }
}

}  // namespace engine::dist
