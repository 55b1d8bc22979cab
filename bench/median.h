// The benchmarks' summary statistic: the middle of several timed rounds, which a noisy
// machine's occasional slow round does not move; and the timer for one round.
//
//   double t = median(round_times);
//   double s = time_call([&] { work(); }, 0.05);  // seconds per call, over ~50 ms of calls
#pragma once

#include <algorithm>
#include <chrono>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// Seconds per call of f, timing enough calls to fill ~`budget` seconds (after one warm-up
// call that fills caches and scratch buffers).
template <class F>
double time_call(F f, double budget) {
  using clock = std::chrono::steady_clock;
  f();
  int iters = 1;
  while (true) {
    auto t0 = clock::now();
    for (int i = 0; i < iters; ++i) f();
    double dt = std::chrono::duration<double>(clock::now() - t0).count();
    if (dt >= budget || iters >= (1 << 20)) return dt / iters;
    iters = std::max(iters * 2, int(iters * budget / std::max(dt, 1e-9)));
  }
}
