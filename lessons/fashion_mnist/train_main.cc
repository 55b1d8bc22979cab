// Trains an MLP or a small CNN on Fashion-MNIST in one process and prints, per epoch, the
// training loss, the test accuracy and the throughput.
//
//   bazel run //lessons/fashion_mnist:train -- --model mlp --epochs 5
//   bazel run //lessons/fashion_mnist:train -- --model cnn --epochs 3 --optimizer adam --lr 0.001
//   bazel run //lessons/fashion_mnist:train -- --model mlp --epochs 10 --resume
//
// The checkpoint goes to checkpoints/<model>.safetensors in the workspace (under bazel run)
// or the current folder, unless --checkpoint says otherwise; --no-checkpoint skips it.
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <string>

#include "lessons/fashion_mnist/trainer.h"
#include "tensor/check.h"

namespace {
[[noreturn]] void usage(const char* why) {
  std::fprintf(stderr,
               "train: %s\nflags: --model mlp|cnn  --epochs N  --batch N  --lr X  --optimizer sgd|adam  --seed N\n"
               "       --train-limit N  --checkpoint PATH  --no-checkpoint  --resume\n",
               why);
  std::exit(2);
}
}  // namespace

int main(int argc, char** argv) {
  fmnist::TrainOptions o;
  o.progress = true;
  bool lr_given = false, no_checkpoint = false;
  for (int i = 1; i < argc; ++i) {
    const std::string flag = argv[i];
    auto value = [&]() -> std::string {
      if (i + 1 >= argc) usage(("missing value after " + flag).c_str());
      return argv[++i];
    };
    if (flag == "--model") o.model = value();
    else if (flag == "--epochs") o.epochs = std::atoi(value().c_str());
    else if (flag == "--batch") o.batch_size = std::atoll(value().c_str());
    else if (flag == "--lr") o.lr = std::atof(value().c_str()), lr_given = true;
    else if (flag == "--optimizer") o.optimizer = value();
    else if (flag == "--seed") o.seed = std::strtoull(value().c_str(), nullptr, 10);
    else if (flag == "--train-limit") o.train_limit = std::atoll(value().c_str());
    else if (flag == "--checkpoint") o.checkpoint = value();
    else if (flag == "--no-checkpoint") no_checkpoint = true;
    else if (flag == "--resume") o.resume = true;
    else usage(("unknown flag " + flag).c_str());
  }
  if (!lr_given && o.optimizer == "adam") o.lr = 1e-3;
  if (no_checkpoint) {
    o.checkpoint.clear();
  } else if (o.checkpoint.empty()) {
    // bazel run starts us inside the runfiles tree; save beside the sources instead.
    const char* ws = std::getenv("BUILD_WORKSPACE_DIRECTORY");
    const std::string dir = std::string(ws ? ws : ".") + "/checkpoints";
    std::filesystem::create_directories(dir);
    o.checkpoint = dir + "/" + o.model + ".safetensors";
  }
  std::printf("Fashion-MNIST, %s, %s lr %g, batch %lld, %d epochs, 1 process\n", o.model.c_str(), o.optimizer.c_str(),
              o.lr, (long long)o.batch_size, o.epochs);
  try {
    int trained = 0;
    auto model = fmnist::train(o, [&](const fmnist::EpochStats& s) {
      ++trained;
      std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  %8.0f samples/s%s\n", s.epoch, s.train_loss,
                  100 * s.test_accuracy, s.samples_per_s, o.checkpoint.empty() ? "" : "  (checkpoint saved)");
      std::fflush(stdout);
    });
    if (trained == 0) {
      std::printf("the checkpoint %s already holds all %d epochs; its test accuracy: %.2f%%\n", o.checkpoint.c_str(),
                  o.epochs, 100 * fmnist::test_accuracy(*model));
    } else if (!o.checkpoint.empty()) {
      std::printf("checkpoint: %s (run again with --resume and more --epochs to continue)\n", o.checkpoint.c_str());
    }
  } catch (const engine::Error& e) {
    std::fprintf(stderr, "train: %s\n", e.what());
    return 1;
  }
  return 0;
}
