// Lesson 3's quick check: combining per-rank summaries gives the global batch's.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "lessons/03_syncbn_and_sharded_state/quick_check/exercise.h"

using lesson3::Moments;

static Moments summarise(const std::vector<double>& v, size_t lo, size_t hi) {
  Moments m;
  m.count = double(hi - lo);
  for (size_t i = lo; i < hi; ++i) m.mean += v[i] / m.count;
  for (size_t i = lo; i < hi; ++i) m.m2 += (v[i] - m.mean) * (v[i] - m.mean);
  return m;
}

TEST_CASE("two equal halves with different means") {
  const std::vector<double> v{1, 2, 3, 11, 12, 13};
  const Moments all = lesson3::combine(summarise(v, 0, 3), summarise(v, 3, 6));
  const Moments want = summarise(v, 0, 6);
  CHECK(all.count == 6);
  CHECK(all.mean == Approx(want.mean));
  CHECK(all.m2 == Approx(want.m2));
}

TEST_CASE("uneven slices, an empty one, combined in any grouping") {
  std::vector<double> v;
  for (int i = 0; i < 17; ++i) v.push_back(std::sin(i * 1.7) * 5 + (i > 9 ? 4 : 0));
  // Ranks with 5, 0, 9 and 3 rows.
  const Moments r0 = summarise(v, 0, 5), r1 = summarise(v, 5, 5), r2 = summarise(v, 5, 14), r3 = summarise(v, 14, 17);
  const Moments want = summarise(v, 0, 17);
  for (const Moments& all : {lesson3::combine(lesson3::combine(lesson3::combine(r0, r1), r2), r3),
                             lesson3::combine(lesson3::combine(r0, r1), lesson3::combine(r2, r3))}) {
    CHECK(all.count == 17);
    CHECK(all.mean == Approx(want.mean).epsilon(1e-12));
    CHECK(all.m2 == Approx(want.m2).epsilon(1e-12));
  }
}
