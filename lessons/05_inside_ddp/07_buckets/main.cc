// Inside DDP, step 7: buckets. One all-reduce per gradient pays the per-message cost
// (latency) once per parameter; one all-reduce for everything cannot start until backward
// ends. Buckets sit between: gradients, in the order backward produces them, are packed
// into buckets of about cap_mb; a bucket is all-reduced as soon as it is full. This step
// counts the messages for several bucket sizes, checks them against the plan, and times
// a step for each (the timings are this machine's; the picture plots them).
//
//   bazel run //lessons/05_inside_ddp:07_buckets
#include <algorithm>
#include <cstdio>

#include "bench/median.h"
#include "dist/dist.h"
#include "lessons/05_inside_ddp/inside.h"
#include "lessons/05_inside_ddp/sync.h"
#include "lessons/common/lesson.h"
#include "lessons/common/plot.h"
#include "lessons/common/trace.h"
#include "lessons/common/tracing_group.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const std::string dir = lessons::output_dir("05_inside_ddp");
  lessons::LineChart chart{"step time against the number of buckets",
                           "buckets (all-reduces per step)",
                           "step time (ms)",
                           {{"rank 0, median of 20 steps", lessons::kBlue, {}}}};
  for (double cap : {1e-6, 1e-3, 0.25, 25.0}) {
    lessons::Trace trace(rank);
    lessons::TracingGroup traced(dist::default_group(), trace);
    auto model = lessons::toy_mlp(0);
    SGD opt(model->parameters(), inside::sgd_options());
    inside::BucketSync sync(model->parameters(), traced, cap);
    std::vector<double> ms;
    for (int step = 0; step < inside::kSteps; ++step) {
      Tensor x, y;
      inside::my_rows(step, rank, world, &x, &y);
      const int64_t t0 = lessons::now_us();
      opt.zero_grad();
      cross_entropy((*model)(Variable(x)), y).backward();
      sync.wait();
      opt.step();
      ms.push_back((lessons::now_us() - t0) / 1e3);
    }
    // The prediction, from the plan alone: one message per bucket per step.
    std::string sizes;
    for (auto& b : sync.buckets()) {
      int64_t n = 0;
      for (size_t k : b) n += model->parameters()[k].numel();
      sizes += (sizes.empty() ? "" : " + ") + std::to_string(n * 4 / 1024) + " KiB";
    }
    const size_t predicted = inside::plan_buckets(model->parameters(), cap).size() * size_t(inside::kSteps);
    if (rank == 0) {
      std::printf("cap %g MiB: %zu buckets (%s); %d all-reduces in %d steps, predicted %zu; median step %.2f ms\n", cap,
                  sync.buckets().size(), sizes.c_str(), traced.collectives(), inside::kSteps, predicted, median(ms));
      chart.series[0].points.push_back({double(sync.buckets().size()), median(ms)});
    }
  }
  if (rank == 0) {
    std::sort(chart.series[0].points.begin(), chart.series[0].points.end());
    chart.y_lo = 0;  // from zero: differences of a few percent look like what they are
    for (auto& [x, y] : chart.series[0].points) chart.y_hi = std::max(chart.y_hi, 1.25 * y);
    chart.save_png(dir + "/bucket_sweep.png");
    // Read back: every measured point is where the chart puts it, in its colour.
    const std::string problem = lessons::check_chart_png(dir + "/bucket_sweep.png", chart);
    std::printf("plot written to %s/bucket_sweep.png (%s)\n", dir.c_str(),
                problem.empty() ? "read back: it shows every point" : problem.c_str());
    lessons::report("plot_check", problem.empty() ? "ok" : problem);
    lessons::report("plot_points", double(chart.series[0].points.size()));
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "07_buckets: %s\n", e.what());
  return 1;
}
