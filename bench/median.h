// The benchmarks' summary statistic: the middle of several timed rounds, which a noisy
// machine's occasional slow round does not move.
//
//   double t = median(round_times);
#pragma once

#include <algorithm>
#include <vector>

inline double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}
