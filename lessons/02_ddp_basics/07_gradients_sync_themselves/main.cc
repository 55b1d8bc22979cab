// Lesson 2, step 7: gradients sync themselves. During backward DDP all-reduces (averages)
// the gradients, bucket by bucket, while backward is still computing the earlier layers'
// gradients. This program shows it three ways:
//   1. the numbers: after backward every rank's .grad is the average of the ranks' own
//      gradients (computed here a second time, by hand, to compare);
//   2. the all-reduce inside: a ring all-reduce, step by step, as a table and an SVG;
//   3. the timing: a Chrome trace of a few DDP steps, where each bucket's all-reduce
//      starts before backward has computed the last gradient.
//
//   bazel run //lessons/02_ddp_basics:07_gradients_sync_themselves
#include <algorithm>
#include <cstdio>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "lessons/common/ring_diagram.h"
#include "lessons/common/trace.h"
#include "lessons/common/tracing_group.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

static const int64_t kRows = 32;

// 1. DDP's gradients equal the average of every rank's own gradients.
static void check_average(int rank) {
  Tensor x, y;
  lessons::toy_batch(0, kRows * dist::get_world_size(), 0, &x, &y);
  x = x.narrow(0, rank * kRows, kRows), y = y.narrow(0, rank * kRows, kRows);

  auto mine = lessons::toy_mlp(0);  // plain backward: this rank's own gradient
  cross_entropy((*mine)(Variable(x)), y).backward();
  for (auto& p : mine->parameters()) dist::all_reduce(p.mutable_grad(), dist::ReduceOp::Avg);  // averaged by hand

  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  cross_entropy(ddp(Variable(x)), y).backward();  // DDP averages during backward
  const double d = lessons::max_difference(*model, *mine, /*grads=*/true);
  std::printf("rank %d: max |DDP's .grad - average of the ranks' gradients| = %.2e\n", rank, d);
  lessons::report("gradient_difference", d);
}

// 2. The ring, drawn from a run on a vector of `world` elements where rank r holds 2^r.
static void draw_ring(int rank, const std::string& dir) {
  const int world = dist::get_world_size();
  Tensor t = full({world * 2}, double(1 << rank));
  Tensor expected = t.clone();
  dist::all_reduce(expected);
  lessons::RingLog log;
  lessons::ring_all_reduce(dist::default_group(), t, &log);
  const auto logs = lessons::gather_ring_logs(dist::default_group(), log);
  std::printf("rank %d: ring result equals dist::all_reduce: %s\n", rank,
              lessons::max_abs_diff(t, expected) == 0 ? "yes" : "NO");
  if (rank == 0) {
    std::printf("%s", lessons::ring_diagram_text(logs).c_str());
    lessons::write_file(dir + "/ring_allreduce.svg", lessons::ring_diagram_svg(logs));
    std::printf("ring diagram written to %s/ring_allreduce.svg\n", dir.c_str());
  }
}

// 3. A timeline of DDP training steps, written as Chrome trace JSON.
static void trace_steps(int rank, const std::string& dir) {
  lessons::Trace trace(rank);
  lessons::TracingGroup traced(dist::default_group(), trace);
  auto model = lessons::toy_mlp(0);
  // Small buckets (a bucket closes once it holds 0.25 MiB or more), so there are two: the
  // last two layers' gradients (267 KiB), then the first layer's (785 KiB).
  dist::DistributedDataParallel ddp(model, {.bucket_cap_mb = 0.25, .first_bucket_mb = 0.25, .group = &traced});
  SGD opt(ddp.parameters(), {.lr = 0.05, .momentum = 0.9});
  // The first layer's weight is the last gradient backward computes: note when it is ready.
  int64_t last_grad_us = 0;
  model->parameters()[0].register_post_accumulate_grad_hook([&](Variable&) { last_grad_us = lessons::now_us(); });
  for (int step = 0; step < 5; ++step) {
    Tensor x, y;
    lessons::toy_batch(step, kRows * dist::get_world_size(), 0, &x, &y);
    x = x.narrow(0, rank * kRows, kRows), y = y.narrow(0, rank * kRows, kRows);
    opt.zero_grad();
    Variable loss;
    {
      auto s = trace.span("forward");
      loss = cross_entropy(ddp(Variable(x)), y);
    }
    const int64_t b0 = lessons::now_us();
    loss.backward();
    const int64_t b1 = lessons::now_us();
    trace.add({"backward", "compute", rank, 0, b0, b1 - b0});
    trace.add({"gradients computed", "compute", rank, 2, b0, last_grad_us - b0});
    // After its last gradient, backward only waits for the buckets' all-reduces to finish.
    trace.add({"waiting for all-reduces", "wait", rank, 2, last_grad_us, b1 - last_grad_us});
    {
      auto s = trace.span("optimizer step");
      opt.step();
    }
  }
  dist::barrier();
  const auto events = trace.write_merged(dir + "/ddp_trace.json", dist::default_group());
  if (rank != 0) return;
  std::printf("DDP buckets (reverse registration order):");
  for (auto& b : ddp.bucket_names()) std::printf(" [%zu parameters]", b.size());
  std::printf("\n");
  // The last step on rank 0, in words.
  int64_t start = 0, end = 0, computed = 0;
  for (auto& e : events)
    if (e.rank == 0 && e.name == "backward") start = e.start_us, end = e.start_us + e.duration_us;
  for (auto& e : events)
    if (e.rank == 0 && e.name == "gradients computed" && e.start_us == start) computed = e.start_us + e.duration_us;
  std::printf("last step on rank 0: backward took %.2f ms and computed its last gradient at +%.2f ms\n",
              (end - start) / 1e3, (computed - start) / 1e3);
  for (auto& e : events)
    if (e.rank == 0 && e.category == "comm" && e.start_us >= start && e.start_us <= end)
      std::printf("  %s started at +%.2f ms, done at +%.2f ms\n", e.name.c_str(), (e.start_us - start) / 1e3,
                  (e.start_us + e.duration_us - start) / 1e3);
  // How much of backward was spent waiting, over steps 2-5 (the first one warms up).
  std::vector<std::pair<int64_t, int64_t>> backwards;  // (start, duration) on rank 0
  for (auto& e : events)
    if (e.rank == 0 && e.name == "backward") backwards.push_back({e.start_us, e.duration_us});
  std::sort(backwards.begin(), backwards.end());
  int64_t backward_us = 0, waiting_us = 0;
  for (size_t i = 1; i < backwards.size(); ++i) {
    const auto [b, d] = backwards[i];
    backward_us += d;
    for (auto& e : events)
      if (e.rank == 0 && e.name == "waiting for all-reduces" && e.start_us >= b && e.start_us <= b + d)
        waiting_us += e.duration_us;
  }
  const double n = double(std::max<size_t>(backwards.size() - 1, 1));
  std::printf(
      "rank 0, steps 2-5: backward took %.2f ms a step, of which %.2f ms (%.0f%%) waiting for all-reduces "
      "after its last gradient; the rest of the communication hid behind computing\n",
      backward_us / 1e3 / n, waiting_us / 1e3 / n,
      100.0 * double(waiting_us) / double(std::max<int64_t>(backward_us, 1)));
  lessons::report("backward_us", double(backward_us));
  lessons::report("waiting_us", double(waiting_us));
  std::printf("trace written to %s/ddp_trace.json (open it in https://ui.perfetto.dev)\n", dir.c_str());
}

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  const std::string dir = lessons::output_dir("02_ddp_basics");
  check_average(rank);
  std::fflush(stdout);
  dist::barrier();
  draw_ring(rank, dir);
  std::fflush(stdout);
  dist::barrier();
  trace_steps(rank, dir);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "07_gradients_sync_themselves: %s\n", e.what());
  return 1;
}
