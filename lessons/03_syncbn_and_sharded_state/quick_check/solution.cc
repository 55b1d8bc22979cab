// One answer to lesson 3's quick check: Chan et al.'s pairwise update.
#include "lessons/03_syncbn_and_sharded_state/quick_check/exercise.h"

namespace lesson3 {

Moments combine(const Moments& a, const Moments& b) {
  const double n = a.count + b.count;
  if (n == 0) return {};
  // The mean moves toward b's by b's share of the count. Each set's squared deviations,
  // measured from the new mean instead of its own, grow by count * (distance)^2; summed,
  // that is delta^2 * na * nb / n.
  const double delta = b.mean - a.mean;
  return {n, a.mean + delta * b.count / n, a.m2 + b.m2 + delta * delta * a.count * b.count / n};
}

}  // namespace lesson3
