// Internal to tensor/: a float sum the compiler vectorises, for the CPU loops of
// batch_norm.cc and conv2d.cc.
//
//   double s = lane_sum(n, [row](int64_t i) { return row[i]; });
#pragma once

#include <cstdint>

namespace engine::detail {

// sum of f(i) for i < S, in 16 independent float lanes (a loop the compiler vectorises,
// which it would not do for one running float sum: that fixes the order of the adds),
// then the lanes and the tail added in double.
template <class F>
double lane_sum(int64_t S, F f) {
  float acc[16] = {};
  int64_t i = 0;
  for (; i + 16 <= S; i += 16)
    for (int k = 0; k < 16; ++k) acc[k] += f(i + k);
  double total = 0;
  for (; i < S; ++i) total += f(i);
  for (float a : acc) total += a;
  return total;
}

}  // namespace engine::detail
