// Lesson 2, step 10: save only on rank 0. The replicas are identical, so one copy is the
// checkpoint: rank 0 writes it (atomically: a temporary file, then a rename), and a barrier
// keeps the others from reading it before it is complete. Then every rank can load it.
//
//   bazel run //lessons/02_ddp_basics:10_save_only_on_rank0
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/common/lesson.h"
#include "nn/loss.h"
#include "nn/safetensors.h"
#include "nn/sgd.h"

using namespace engine;
using namespace engine::nn;

// Bytes this process has written with write() so far (files, pipes and sockets alike).
static long long bytes_written() {
  std::ifstream io("/proc/self/io");
  std::string key;
  long long value = 0;
  while (io >> key >> value)
    if (key == "wchar:") return value;
  return -1;
}

int main() try {
  dist::init_process_group("gloo");
  const int rank = dist::get_rank();
  auto model = lessons::toy_mlp(0);
  dist::DistributedDataParallel ddp(model);
  SGD opt(ddp.parameters(), {.lr = 0.05});
  for (int step = 0; step < 5; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * dist::get_world_size() + rank, 32, 0, &x, &y);
    opt.zero_grad();
    cross_entropy(ddp(Variable(x)), y).backward();
    opt.step();
  }
  const std::string path = lessons::output_dir("02_ddp_basics") + "/ckpt.safetensors";
  std::fflush(stdout);
  const long long before = bytes_written();
  dist::save_on_rank0(path, ddp.module().state_dict());  // if rank == 0: torch.save(model.module.state_dict(), path)
  const long long during = bytes_written() - before;
  const long long file_bytes = (long long)std::filesystem::file_size(path);
  std::printf("rank %d wrote %lld bytes while saving; the file has %lld bytes\n", rank, during, file_bytes);
  lessons::report("bytes_written", double(during));
  lessons::report("file_bytes", double(file_bytes));

  // Every rank loads it back into a fresh model: the same bits as its live replica.
  auto fresh = lessons::toy_mlp(7);
  fresh->load_state_dict(load_safetensors(path));
  std::printf("rank %d loaded the checkpoint: %s, live replica %s\n", rank, lessons::fingerprint(*fresh).c_str(),
              lessons::fingerprint(ddp.module()).c_str());
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "10_save_only_on_rank0: %s\n", e.what());
  return 1;
}
