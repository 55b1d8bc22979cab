// Inside DDP, step 9: a cost model. A ring all-reduce of S bytes over n ranks takes
//   T(n, S) = 2 (n-1) alpha + 2 (n-1)/n S beta
// (2(n-1) steps, each paying a latency alpha; each rank sends 2(n-1)/n S bytes at beta
// seconds per byte). Measuring T on this machine with 2 ranks gives alpha and beta; the
// compute time of a step gives c, seconds per parameter per sample. Then, with b samples
// per rank and P parameters, DDP on n ranks runs n times the samples in
//   t_compute + T(n, 4P)   (no overlap; with full overlap, max of the two)
// and its speedup over one process is n t_compute / (t_compute + T(n, 4P)). DDP is worth
// it when each rank computes long enough to hide the all-reduce: the answer below is the
// smallest per-rank batch that keeps 80% of the ideal speedup.
//
// The model is the ring's, so the ring is what runs: on one machine all_reduce would take
// shared memory, so this step forces the ring (ENGINE_ALLREDUCE=ring) unless told
// otherwise, says which algorithm ran, draws the measured times beside the fitted line,
// and warns when the fit is poor (a busy machine).
//
//   bazel run //lessons/05_inside_ddp:09_cost_model
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "bench/median.h"
#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/05_inside_ddp/inside.h"
#include "lessons/common/lesson.h"
#include "lessons/common/plot.h"
#include "lessons/common/trace.h"
#include "nn/loss.h"

using namespace engine;
using namespace engine::nn;

// Seconds for one all-reduce of `bytes`, median over 15 (after 3 warm-ups); every rank
// starts each one together (barrier), rank 0's clock.
static double time_all_reduce(int64_t bytes) {
  Tensor t = zeros({bytes / 4});
  std::vector<double> s;
  for (int i = 0; i < 18; ++i) {
    dist::barrier();
    const int64_t t0 = lessons::now_us();
    dist::all_reduce(t);
    if (i >= 3) s.push_back((lessons::now_us() - t0) * 1e-6);
  }
  return median(s);
}

// Seconds per training step of the toy MLP, 64 samples on this rank, median of 15.
static double time_step(Module& model, Module& forward) {
  SGD opt(model.parameters(), inside::sgd_options());
  std::vector<double> s;
  for (int i = 0; i < 18; ++i) {
    Tensor x, y;
    inside::my_rows(i, 0, 1, &x, &y);  // a whole batch of 64 on every rank
    const int64_t t0 = lessons::now_us();
    opt.zero_grad();
    cross_entropy(forward(Variable(x)), y).backward();
    opt.step();
    if (i >= 3) s.push_back((lessons::now_us() - t0) * 1e-6);
  }
  return median(s);
}

// Measured all-reduce times beside the fitted line, against log2 of the size.
template <class Model>
static void draw_fit(const std::string& path, const std::vector<double>& S, const std::vector<double>& T, Model model) {
  lessons::LineChart chart{"ring all-reduce on 2 ranks: measured and fitted", "log2(bytes)", "milliseconds", {}};
  chart.series.push_back({"measured", lessons::palette()[0], {}});
  chart.series.push_back({"model 2 alpha + S beta", lessons::palette()[1], {}});
  for (size_t i = 0; i < S.size(); ++i) {
    chart.series[0].points.push_back({std::log2(S[i]), T[i] * 1e3});
    chart.series[1].points.push_back({std::log2(S[i]), model(2, S[i]) * 1e3});
  }
  chart.save_png(path);
  const std::string problem = lessons::check_chart_png(path, chart);
  std::printf("measured beside fitted: %s (%s)\n", path.c_str(),
              problem.empty() ? "read back: it shows every point" : problem.c_str());
  lessons::report("fit_plot_check", problem.empty() ? "ok" : problem);
}

int main() try {
  setenv("ENGINE_ALLREDUCE", "ring", /*overwrite=*/0);  // fit the algorithm the model describes
  dist::init_process_group("gloo");
  const int rank = dist::get_rank(), world = dist::get_world_size();
  const std::string algorithm = dist::default_group().all_reduce_algorithm();
  ENGINE_REQUIRE(world == 2, "the cost model is fitted on 2 ranks; run with NPROC=2");
  const std::string dir = lessons::output_dir("05_inside_ddp");

  // 1. All-reduce times, and T = a + b S through them. With n = 2: a = 2 alpha, b = beta.
  //    Each parameter from the sizes it dominates: beta is the slope between the two
  //    largest sizes (bandwidth-bound), a what is left of the smallest one's time
  //    (latency-bound). A least-squares line through all the points would let the many
  //    small sizes pull the slope away from what the large ones show (and a link whose
  //    rate is capped often passes short bursts faster than its rate).
  std::vector<double> S, T;
  for (int64_t bytes = 4096; bytes <= (16 << 20); bytes *= 4)
    S.push_back(double(bytes)), T.push_back(time_all_reduce(bytes));
  const size_t last = S.size() - 1;
  const double b = std::max(0.0, (T[last] - T[last - 1]) / (S[last] - S[last - 1]));
  const double a = std::max(0.0, T[0] - b * S[0]);
  const double alpha = a / 2, beta = b;
  auto ring = [&](int n, double bytes) { return 2 * (n - 1) * alpha + 2.0 * (n - 1) / n * bytes * beta; };
  // How far the bandwidth-bound sizes (>= 1 MiB) lie from the line: a busy machine shows
  // here (the small sizes wander with the scheduler on any machine).
  double worst_fit = 0;
  for (size_t i = 0; i < S.size(); ++i)
    if (S[i] >= (1 << 20)) worst_fit = std::max(worst_fit, std::abs(T[i] - ring(2, S[i])) / T[i]);

  // 2. Compute: one process's step, and DDP's on 2 ranks, both 64 samples per rank.
  auto single = lessons::toy_mlp(0);
  const double t_single = rank == 0 ? time_step(*single, *single) : 0;
  dist::barrier();
  auto replica = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(replica);
  const double t_ddp = time_step(*replica, ddp);
  int64_t P = 0;
  for (auto& p : single->parameters()) P += p.numel();
  const double c = t_single / (double(P) * 64);

  if (rank == 0) {
    std::printf("all_reduce ran the %s algorithm (%s)\n", algorithm.c_str(),
                algorithm == "ring" ? "the one the model describes"
                                    : "NOT the ring: the fit describes another algorithm than the formula");
    lessons::report("algorithm", algorithm);
    std::printf("fit on 2 ranks: alpha = %.3e s per step, beta = %.3e s per byte (%.2f GB/s)\n", alpha, beta,
                1e-9 / beta);
    lessons::report("alpha", alpha);
    lessons::report("beta", beta);
    lessons::report("worst_fit", worst_fit);
    if (worst_fit > 0.25)
      std::printf(
          "warning: a measured time of 1 MiB or more is %.0f%% away from the fitted line: this machine was busy (or "
          "the ring is not what ran), so alpha and beta mean little; run again on a quiet machine\n",
          100 * worst_fit);
    draw_fit(dir + "/allreduce_fit.png", S, T, ring);
    for (size_t i = 0; i < S.size(); ++i) {
      std::printf("  all-reduce of %8.0f KiB: measured %8.3f ms, model %8.3f ms\n", S[i] / 1024, T[i] * 1e3,
                  ring(2, S[i]) * 1e3);
      lessons::report("measured", lessons::numbers({S[i], T[i], ring(2, S[i])}));  // bytes, seconds, seconds
    }
    std::printf("compute: c = %.3e s per parameter per sample (one process, %lld parameters, batch 64: %.3f ms)\n", c,
                (long long)P, t_single * 1e3);
    lessons::report("c", c);
    const double tc = t_single, tm = ring(2, 4.0 * double(P));
    std::printf("DDP on 2 ranks, this model: measured speedup %.2f; model %.2f (no overlap) to %.2f (full overlap)\n",
                2 * t_single / t_ddp, 2 * tc / (tc + tm), 2 * tc / std::max(tc, tm));
    lessons::report("ddp_speedup",
                    lessons::numbers({2 * t_single / t_ddp, 2 * tc / (tc + tm), 2 * tc / std::max(tc, tm)}));

    // 3. Predictions: model sizes 100 K .. 100 M parameters, 2 .. 8 ranks, 64 samples per rank.
    lessons::LineChart chart{"predicted DDP speedup, 64 samples per rank", "ranks", "speedup over one process", {}};
    chart.series.push_back({"ideal", lessons::kGrey, {}});
    for (int n = 1; n <= 8; ++n) chart.series[0].points.push_back({double(n), double(n)});
    std::printf("predicted (no overlap; one core per rank assumed, this machine has 2):\n");
    for (double params : {1e5, 1e6, 1e7, 1e8}) {
      lessons::Series s{std::to_string(int64_t(params >= 1e6 ? params / 1e6 : params / 1e3)) +
                            (params >= 1e6 ? "M params" : "K params"),
                        lessons::palette()[chart.series.size() - 1],
                        {{1, 1}}};
      for (int n = 2; n <= 8; ++n) {
        const double tc = c * params * 64, tm = ring(n, 4 * params), speedup = n * tc / (tc + tm);
        std::printf("  P %.0e  n %d: compute %9.3f ms, all-reduce %9.3f ms, speedup %5.2f\n", params, n, tc * 1e3,
                    tm * 1e3, speedup);
        lessons::report("prediction", lessons::numbers({params, double(n), tc, tm, speedup}));
        s.points.push_back({double(n), speedup});
      }
      chart.series.push_back(s);
      // 80% efficiency, n tc / (tc + T) >= 0.8 n, needs tc >= 4 T: at least 4 T / (c P) samples per rank.
      const double needed = std::ceil(4 * ring(8, 4 * params) / (c * params));
      std::printf("  -> P %.0e: on 8 ranks, 80%% efficiency needs at least %.0f samples per rank per step\n", params,
                  needed);
      lessons::report("verdict", lessons::numbers({params, needed}));
    }
    // What ran here, on the same axes: this model's measured speedup on 2 ranks.
    chart.series.push_back({"measured here (" + std::to_string(P / 1000) + "K params, 2 ranks)",
                            lessons::kPurple,
                            {{1, 1}, {2, 2 * t_single / t_ddp}}});
    chart.save_png(dir + "/ddp_scaling.png");
    const std::string problem = lessons::check_chart_png(dir + "/ddp_scaling.png", chart);
    std::printf("plot written to %s/ddp_scaling.png, with the speedup measured here (%s)\n", dir.c_str(),
                problem.empty() ? "read back: it shows every point" : problem.c_str());
    lessons::report("scaling_plot_check", problem.empty() ? "ok" : problem);
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "09_cost_model: %s\n", e.what());
  return 1;
}
