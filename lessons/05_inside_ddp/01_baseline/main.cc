// Inside DDP, step 1: the baseline. One process trains the toy MLP on the whole batch of
// 64 rows for 20 steps. Every later step splits this work over ranks in a new way, and
// must end where this run ends.
//
//   bazel run //lessons/05_inside_ddp:01_baseline
#include <cstdio>

#include "lessons/05_inside_ddp/inside.h"
#include "lessons/common/lesson.h"

int main() try {
  const inside::Run run = inside::baseline();
  for (size_t s = 0; s < run.losses.size(); s += 5) std::printf("step %2zu  loss %.6f\n", s, run.losses[s]);
  std::printf("after %d steps: loss %.6f, parameters %s\n", inside::kSteps, run.losses.back(),
              lessons::fingerprint(*run.model).c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "01_baseline: %s\n", e.what());
  return 1;
}
