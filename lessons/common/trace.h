// A timeline recorder that writes Chrome trace JSON: open the file in https://ui.perfetto.dev
// or chrome://tracing and every rank becomes one row, every span one bar.
//
//   Trace trace(rank);
//   { auto s = trace.span("backward", "compute"); loss.backward(); }   // records start..end
//   trace.write_merged(dir, group);   // rank 0 writes dir/ddp_trace.json with all ranks' spans
//
// Times are microseconds of the monotonic clock, which all processes on one machine share,
// so spans recorded by different ranks line up on one time axis.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "dist/process_group.h"

namespace lessons {

struct TraceEvent {
  std::string name, category;  // e.g. "backward", "compute"; "all_reduce 785 KB", "comm"
  int rank = 0, lane = 0;      // lane: a row within the rank (see lane_name)
  int64_t start_us = 0, duration_us = 0;
};

int64_t now_us();

class Trace {
 public:
  explicit Trace(int rank) : rank_(rank) {}

  // Records [start, end) when the returned object goes out of scope.
  class Span {
   public:
    Span(Trace& t, std::string name, std::string category, int lane);
    ~Span();
    Span(const Span&) = delete;

   private:
    Trace& trace_;
    TraceEvent event_;
  };
  Span span(const std::string& name, const std::string& category = "compute", int lane = 0) {
    return Span(*this, name, category, lane);
  }
  void add(TraceEvent e);  // thread-safe
  std::vector<TraceEvent> events() const;

  // Every rank calls this (a collective): each rank's events reach rank 0, which writes
  // them all to `path` as Chrome trace JSON. Returns the merged events on rank 0.
  std::vector<TraceEvent> write_merged(const std::string& path, engine::dist::ProcessGroup& group) const;

 private:
  int rank_;
  mutable std::mutex mu_;
  std::vector<TraceEvent> events_;
};

// The name of a rank's row: 0 "compute", 1 "communication", 2 "backward: computing, then
// waiting" (when its last gradient is ready, and the wait for the all-reduces after).
std::string lane_name(int lane);

// The JSON text of a trace (one "X" event per span, a name for every rank's rows).
std::string chrome_trace_json(const std::vector<TraceEvent>& events);

}  // namespace lessons
