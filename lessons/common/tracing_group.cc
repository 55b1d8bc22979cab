#include "lessons/common/tracing_group.h"

#include <cstdio>

namespace lessons {

using namespace engine;
using dist::Work;

static std::string sized(const char* what, const Tensor& t) {
  char b[64];
  const double kb = double(t.nbytes()) / 1024;
  std::snprintf(b, sizeof b, "%s %.0f KB", what, kb);
  return b;
}

TracingGroup::TracingGroup(dist::ProcessGroup& inner, Trace& trace)
    : ProcessGroup(inner.rank(), inner.size()), inner_(inner), trace_(trace), thread_([this] { watcher(); }) {}

TracingGroup::~TracingGroup() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

Work TracingGroup::watch(Work inner, const std::string& name) {
  Pending p{inner, Work::pending(), {}};
  p.event.name = name;
  p.event.category = "comm";
  p.event.rank = rank();
  p.event.lane = 1;
  p.event.start_us = now_us();
  Work outer = p.outer;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(p));
    ++count_;
  }
  cv_.notify_all();
  return outer;
}

void TracingGroup::watcher() {
  for (;;) {
    Pending p;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      p = std::move(queue_.front());
      queue_.pop_front();
    }
    try {
      p.inner.wait();
      p.event.duration_us = now_us() - p.event.start_us;
      trace_.add(p.event);
      p.outer.finish();
    } catch (...) {
      p.outer.fail(std::current_exception());
    }
  }
}

Work TracingGroup::all_reduce(Tensor t, dist::ReduceOp op) {
  return watch(inner_.all_reduce(t, op), sized("all_reduce", t));
}
Work TracingGroup::broadcast(Tensor t, int root) { return watch(inner_.broadcast(t, root), sized("broadcast", t)); }
Work TracingGroup::all_gather(std::vector<Tensor>* outputs, Tensor input) {
  return watch(inner_.all_gather(outputs, input), sized("all_gather", input));
}
Work TracingGroup::reduce_scatter(Tensor output, Tensor input, dist::ReduceOp op) {
  return watch(inner_.reduce_scatter(output, input, op), sized("reduce_scatter", input));
}
Work TracingGroup::barrier() { return watch(inner_.barrier(), "barrier"); }
Work TracingGroup::send(Tensor t, int dst) { return watch(inner_.send(t, dst), sized("send", t)); }
Work TracingGroup::recv(Tensor t, int src) { return watch(inner_.recv(t, src), sized("recv", t)); }

}  // namespace lessons
