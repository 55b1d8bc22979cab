// Lesson 4, step 4: when a rank fails. Collectives need every rank, so one rank's death
// stalls all the others. The launcher watches its children: the moment one exits with an
// error or is killed, it stops the others (SIGTERM, then SIGKILL after 5 s), says which
// rank failed and how, and exits with its status. Ranks blocked in a collective also
// notice the broken connection themselves and fail with an error that names the peer.
// A rank that ends without an error before it joins (--how leave) strands the others in
// init_process_group: the launcher sees that too, from what each rank tells it.
//
//   bazel run //lessons/04_launching_with_torchrun:04_when_a_rank_fails
//   bazel run //lessons/04_launching_with_torchrun:04_when_a_rank_fails -- --how kill
//   bazel run //lessons/04_launching_with_torchrun:04_when_a_rank_fails -- --how leave
#include <signal.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/sgd.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

int main(int argc, char** argv) try {
  std::string how = "error";
  Flags flags("04_when_a_rank_fails", "Rank 1 fails at step 3; the launcher stops the others and names it.");
  flags.add("--how", &how, {"error", "kill", "leave"},
            "how rank 1 fails: an exception, kill -9, or returning 0 before init_process_group");
  flags.parse_or_exit(argc, argv);
  const bool kill_myself = how == "kill";
  if (how == "leave" && std::getenv("RANK") && std::strcmp(std::getenv("RANK"), "1") == 0) {
    // The mistake this stands for: `if (rank != 0) return 0;` placed before the group is made.
    std::printf("rank 1: returning 0 before init_process_group\n");
    return 0;
  }
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  SGD opt(ddp.parameters(), {.lr = 0.05});
  for (int step = 0; step < 1000; ++step) {
    if (rank == 1 && step == 3) {
      std::printf("rank 1: failing at step 3 (%s)\n", kill_myself ? "kill -9" : "an error");
      std::fflush(stdout);
      if (kill_myself) raise(SIGKILL);
      throw Error("rank 1: a simulated error at step 3");
    }
    Tensor x, y;
    lessons::toy_batch(step, 32, uint64_t(rank), &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();  // blocks until every rank contributes
    opt.step();
    std::printf("rank %d: step %d done\n", rank, step);
    std::fflush(stdout);
  }
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "04_when_a_rank_fails: %s\n", e.what());
  return 1;
}
