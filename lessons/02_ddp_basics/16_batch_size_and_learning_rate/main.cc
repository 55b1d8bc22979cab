// Lesson 2, step 16: the learning rate each run of the step uses, step by step: the
// recap's schedule (recap::learning_rate), with and without the linear warm-up. run.sh
// trains the recap with these settings and prints this beside the accuracies it reached.
//
//   16_batch_size_and_learning_rate --steps-per-epoch 469 --epochs 10 --lr 0.1 --warmup-epochs 0
#include <cstdio>
#include <vector>

#include "lessons/02_ddp_basics/13_recap/schedule.h"
#include "tools/flags/flags.h"

int main(int argc, char** argv) try {
  // Defaults: the recap's own run, 2 ranks x 64 images over 60,000 (469 steps an epoch).
  int64_t per_epoch = 469;
  int epochs = 10;
  double peak = 0.1, warmup_epochs = 0;
  engine::Flags flags("16_batch_size_and_learning_rate", "Prints the recap's learning rate along a run.");
  flags.add("--steps-per-epoch", &per_epoch, 1, int64_t(1) << 30, "optimizer steps in an epoch");
  flags.add("--epochs", &epochs, 1, 100000, "epochs");
  flags.add("--lr", &peak, 0, 100, "peak learning rate");
  flags.add("--warmup-epochs", &warmup_epochs, 0, 100000, "warm-up epochs");
  flags.parse_or_exit(argc, argv);
  const int64_t total = per_epoch * epochs, warmup = int64_t(warmup_epochs * double(per_epoch));
  std::printf("lr at step:");
  const std::vector<int64_t> at = warmup > 0 ? std::vector<int64_t>{0, warmup / 2, warmup - 1, total / 2, total - 1}
                                             : std::vector<int64_t>{0, total / 4, total / 2, 3 * total / 4, total - 1};
  for (int64_t s : at) std::printf("  %lld: %.4f", (long long)s, recap::learning_rate(peak, s, total, warmup));
  std::printf("\n");
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "16_batch_size_and_learning_rate: %s\n", e.what());
  return 1;
}
