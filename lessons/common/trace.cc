#include "lessons/common/trace.h"

#include <chrono>
#include <cstdio>
#include <fstream>
#include <set>
#include <sstream>

#include "tensor/check.h"
#include "tensor/ops.h"

namespace lessons {

using namespace engine;

int64_t now_us() {
  return std::chrono::duration_cast<std::chrono::microseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

Trace::Span::Span(Trace& t, std::string name, std::string category, int lane) : trace_(t) {
  event_.name = std::move(name);
  event_.category = std::move(category);
  event_.rank = t.rank_;
  event_.lane = lane;
  event_.start_us = now_us();
}

Trace::Span::~Span() {
  event_.duration_us = now_us() - event_.start_us;
  trace_.add(event_);
}

void Trace::add(TraceEvent e) {
  std::lock_guard<std::mutex> lock(mu_);
  events_.push_back(std::move(e));
}

std::vector<TraceEvent> Trace::events() const {
  std::lock_guard<std::mutex> lock(mu_);
  return events_;
}

// One event per line: "rank lane start duration category\tname" (names may hold spaces).
static std::string serialize(const std::vector<TraceEvent>& events) {
  std::ostringstream s;
  for (const auto& e : events)
    s << e.rank << ' ' << e.lane << ' ' << e.start_us << ' ' << e.duration_us << ' ' << e.category << '\t' << e.name
      << '\n';
  return s.str();
}

static std::vector<TraceEvent> parse(const std::string& text) {
  std::vector<TraceEvent> out;
  std::istringstream in(text);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream l(line);
    TraceEvent e;
    l >> e.rank >> e.lane >> e.start_us >> e.duration_us >> e.category;
    l.get();  // the tab
    std::getline(l, e.name);
    out.push_back(e);
  }
  return out;
}

// Bytes travel packed in an int64 tensor: first every rank's length, then the padded payloads.
std::vector<TraceEvent> Trace::write_merged(const std::string& path, dist::ProcessGroup& group) const {
  const std::string mine = serialize(events());
  std::vector<Tensor> lengths;
  group.all_gather(&lengths, from_vector(std::vector<int64_t>{int64_t(mine.size())})).wait();
  size_t longest = 0;
  for (auto& l : lengths) longest = std::max(longest, size_t(l.item()));
  Tensor buf = zeros({int64_t(longest + 7) / 8}, DType::Int64);
  std::copy(mine.begin(), mine.end(), buf.bytes());
  std::vector<Tensor> all;
  group.all_gather(&all, buf).wait();
  std::vector<TraceEvent> merged;
  if (group.rank() != 0) return merged;
  for (size_t r = 0; r < all.size(); ++r) {
    const std::string text(all[r].bytes(), size_t(lengths[r].item()));
    for (auto& e : parse(text)) merged.push_back(e);
  }
  std::ofstream f(path);
  ENGINE_REQUIRE(f.good(), "[Trace] cannot write ", path);
  f << chrome_trace_json(merged);
  f.close();  // a full disk shows at the flush
  ENGINE_REQUIRE(f.good(), "[Trace] error writing ", path);
  return merged;
}

static std::string escaped(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

std::string lane_name(int lane) {
  static const char* names[] = {"compute", "communication", "backward: computing, then waiting"};
  return lane >= 0 && lane < 3 ? names[lane] : "lane " + std::to_string(lane);
}

std::string chrome_trace_json(const std::vector<TraceEvent>& events) {
  std::ostringstream s;
  s << "{\"displayTimeUnit\": \"ms\", \"traceEvents\": [\n";
  std::set<int> ranks;
  for (const auto& e : events) ranks.insert(e.rank);
  // Every row gets a name: each (rank, lane) that holds a span.
  std::set<std::pair<int, int>> rows;
  for (const auto& e : events) rows.insert({e.rank, e.lane});
  bool first = true;
  for (int r : ranks) {
    s << (first ? "" : ",\n") << "{\"name\": \"process_name\", \"ph\": \"M\", \"pid\": " << r
      << ", \"args\": {\"name\": \"rank " << r << "\"}}";
    first = false;
  }
  for (auto [r, lane] : rows)
    s << ",\n{\"name\": \"thread_name\", \"ph\": \"M\", \"pid\": " << r << ", \"tid\": " << lane
      << ", \"args\": {\"name\": \"" << escaped(lane_name(lane)) << "\"}}";
  for (const auto& e : events) {
    s << (first ? "" : ",\n") << "{\"name\": \"" << escaped(e.name) << "\", \"cat\": \"" << escaped(e.category)
      << "\", \"ph\": \"X\", \"ts\": " << e.start_us << ", \"dur\": " << e.duration_us << ", \"pid\": " << e.rank
      << ", \"tid\": " << e.lane << "}";
    first = false;
  }
  s << "\n]}\n";
  return s.str();
}

}  // namespace lessons
