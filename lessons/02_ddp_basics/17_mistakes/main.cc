// Lesson 2, step 17: mistakes, and what each looks like. One program, one mistake per run
// (mistakes.sh runs them all, each as its own job, with a 3-second collective timeout).
//
//   17_mistakes --mistake forgot_set_epoch|every_rank_saves|unused_parameter|
//                         collective_on_one_rank|a_rank_hangs|saved_the_wrapper|
//                         loaded_on_one_rank
#include <unistd.h>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/distributed_sampler.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"
#include "tensor/ops.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::nn;

namespace {

// 1. The sampler's epoch stays 0: every epoch visits the same order. Rank 0's sampler
// notices the second pass over epoch 0 and says so (PyTorch's says nothing).
void forgot_set_epoch(int rank) {
  dist::DistributedSampler sampler(12);
  for (int epoch = 0; epoch < 3; ++epoch) {  // sampler.set_epoch(epoch) missing here
    std::printf("rank %d epoch %d: %s\n", rank, epoch, lessons::join(sampler.indices()).c_str());
    std::fflush(stdout);
  }
  lessons::report("orders_seen", lessons::join(sampler.order()));
}

// 2. Every rank saves the checkpoint, to the same path: world-size times the writing, all
// of it the same bytes (the replicas are identical). Our saves are atomic (a temporary file,
// then a rename), so the file ends whole; torch.save from every rank to one path writes the
// same file concurrently and can leave it torn.
void every_rank_saves(int rank) {
  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  const std::string path = lessons::output_dir("02_mistakes") + "/every_rank.safetensors";
  save_safetensors(path, ddp.module().state_dict());  // should be: dist::save_on_rank0(path, ...)
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  const double bytes = double(in.tellg());
  std::printf("rank %d wrote %s (%.0f bytes); save_on_rank0 would have written it once\n", rank, path.c_str(), bytes);
  lessons::report("bytes_written", bytes);
  dist::barrier();
  const StateDict back = load_safetensors(path);
  std::printf("rank %d: the file is whole (%zu tensors load) because each save is a rename\n", rank, back.size());
}

// 3. A parameter forward never uses: its bucket can never be complete, so DDP names it.
struct WithUnused : Module {
  std::shared_ptr<Linear> used, unused;
  WithUnused() {
    Generator g(3);
    used = register_module("used", std::make_shared<Linear>(8, 4, true, &g));
    unused = register_module("head_not_used", std::make_shared<Linear>(8, 4, true, &g));
  }
  Variable forward(const Variable& x) override { return (*used)(x); }
};

void unused_parameter(int rank) {
  Generator g(static_cast<uint64_t>(rank));
  const Tensor x = randn({16, 8}, &g), y = randint(0, 4, {16}, &g);
  dist::DistributedDataParallel ddp(std::make_shared<WithUnused>());
  try {
    cross_entropy(ddp(Variable(x)), y).backward();
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", rank, e.what());
    lessons::report("unused_error", e.what());
  }
  dist::DistributedDataParallel fixed(std::make_shared<WithUnused>(), {.find_unused_parameters = true});
  cross_entropy(fixed(Variable(x)), y).backward();
  std::printf("rank %d: with find_unused_parameters=true the same backward completes\n", rank);
  lessons::report("unused_fixed", 1);
}

// 4. Rank 0 all-reduces its loss to log it; the other ranks do not. Their next collective
// (the next step's: DDP's replica check at its forward, ddp.h) meets rank 0's logging call.
void collective_on_one_rank(int rank) {
  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  SGD opt(ddp.parameters(), {.lr = 0.05});
  for (int step = 0; step < 2; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * 2 + rank, 32, 0, &x, &y);
    opt.zero_grad();
    Variable loss = cross_entropy(ddp(Variable(x)), y);
    loss.backward();
    opt.step();
    if (rank == 0) {  // the mistake: a collective inside `if rank == 0`
      Tensor l = from_vector(std::vector<float>{float(loss.item())});
      dist::all_reduce(l, dist::ReduceOp::Avg);
      std::printf("rank 0: mean loss %.4f\n", l.item());
    }
  }
}

// 5. One rank stops making progress (here: it sleeps, as if stuck reading data); the
// others wait in their next collective until the timeout, then name it.
void a_rank_hangs(int rank) {
  Tensor t = ones({4});
  if (rank == 1) std::this_thread::sleep_for(std::chrono::seconds(30));
  const auto t0 = std::chrono::steady_clock::now();
  dist::all_reduce(t);
  std::printf("rank %d: all_reduce done after %.1f s\n", rank,
              std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
}

// 6. Rank 0 saves the wrapper's state_dict(), whose keys are "module.<name>" (DDP holds the
// model as its child "module", as PyTorch's does). A program that loads it into the bare
// model (an evaluation script, say) finds none of the model's own names.
void saved_the_wrapper(int rank) {
  dist::DistributedDataParallel ddp(lessons::toy_mlp(0));
  const std::string path = lessons::output_dir("02_mistakes") + "/wrapper.safetensors";
  dist::save_on_rank0(path, ddp.state_dict());  // should be: ddp.module().state_dict()
  const StateDict saved = load_safetensors(path);
  std::printf("rank %d: the checkpoint's keys: %s, ...\n", rank, saved.begin()->first.c_str());
  auto bare = lessons::toy_mlp(1);  // the model without DDP, as an evaluation program builds it
  try {
    bare->load_state_dict(saved);
  } catch (const std::exception& e) {
    std::printf("rank %d: %s\n", rank, e.what());
    lessons::report("prefix_error", e.what());
  }
  dist::save_on_rank0(path, ddp.module().state_dict());  // the fix: the wrapped model's own names
  bare->load_state_dict(load_safetensors(path));
  std::printf("rank %d: saved from ddp.module(), it loads into the bare model\n", rank);
  lessons::report("prefix_fixed", 1);
}

// 7. Resuming: rank 0 saved the checkpoint, so rank 0 alone loads it, after wrapping. The
// other ranks keep the fresh weights; each rank then computes its gradient at its own
// weights and applies the same average: the replicas never meet again. DDP compares them
// at training forwards 1, 2, 4, ... and names the difference at the first.
void loaded_on_one_rank(int rank) {
  const std::string path = lessons::output_dir("02_mistakes") + "/trained.safetensors";
  dist::save_on_rank0(path, lessons::toy_mlp(5)->state_dict());  // a run trained earlier
  dist::DistributedDataParallel ddp(lessons::toy_mlp(0));
  SGD opt(ddp.parameters(), {.lr = 0.05});
  if (rank == 0) ddp.module().load_state_dict(load_safetensors(path));  // should be: on every rank
  for (int step = 0; step < 2; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * 2 + rank, 32, 0, &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  }
}

}  // namespace

int main(int argc, char** argv) {
  std::string mistake;
  Flags flags("17_mistakes", "Makes one of DDP's usual mistakes, to show what it looks like.");
  flags.add("--mistake", &mistake,
            {"forgot_set_epoch", "every_rank_saves", "unused_parameter", "collective_on_one_rank", "a_rank_hangs",
             "saved_the_wrapper", "loaded_on_one_rank"},
            "which mistake");
  flags.parse_or_exit(argc, argv);
  int rank = -1;
  try {
    dist::init_process_group("gloo");
    rank = dist::get_rank();
    if (mistake == "forgot_set_epoch") forgot_set_epoch(rank);
    if (mistake == "every_rank_saves") every_rank_saves(rank);
    if (mistake == "unused_parameter") unused_parameter(rank);
    if (mistake == "collective_on_one_rank") collective_on_one_rank(rank);
    if (mistake == "a_rank_hangs") a_rank_hangs(rank);
    if (mistake == "saved_the_wrapper") saved_the_wrapper(rank);
    if (mistake == "loaded_on_one_rank") loaded_on_one_rank(rank);
    dist::destroy_process_group();
    return 0;
  } catch (const std::exception& e) {
    std::printf("rank %d stopped: %s\n", rank, e.what());
    lessons::report("error", e.what());
    return 1;
  }
}
