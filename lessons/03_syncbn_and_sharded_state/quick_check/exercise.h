// Lesson 3's quick check: the arithmetic inside SyncBatchNorm. Each rank summarises its
// slice of a feature by (count, mean, m2), m2 being the sum of squared deviations from
// its mean; the global batch's summary comes from combining them two at a time.
//
//   Moments all = combine(combine(rank0, rank1), rank2);
//   double variance = all.m2 / all.count;    // what batch norm divides by (biased)
#pragma once

namespace lesson3 {

struct Moments {
  double count = 0, mean = 0, m2 = 0;
};

// The summary of the union of the two sets of numbers a and b summarise.
Moments combine(const Moments& a, const Moments& b);

}  // namespace lesson3
