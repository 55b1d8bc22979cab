// Trains an MLP or a small CNN on Fashion-MNIST in one process and prints, per epoch, the
// training loss, the test accuracy and the throughput.
//
//   bazel run //lessons/fashion_mnist:train -- --model mlp --epochs 5
//   bazel run //lessons/fashion_mnist:train -- --model cnn --epochs 3 --optimizer adam --lr 0.001
//   bazel run //lessons/fashion_mnist:train -- --model mlp --epochs 10 --resume
//
// The checkpoint goes to checkpoints/<model>.safetensors in the workspace (under bazel run)
// or the current folder, unless --checkpoint says otherwise; --no-checkpoint skips it.
// Told to stop (Ctrl-C, SIGTERM, SIGHUP, a scheduler's SIGUSR1 or SIGUSR2), it saves after
// the step it is in, says where, and exits 143; --resume continues from that step.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <filesystem>
#include <memory>
#include <string>

#include "lessons/fashion_mnist/trainer.h"
#include "nn/file_claim.h"
#include "nn/safetensors.h"
#include "tensor/check.h"
#include "tensor/gemm_bf16.h"
#include "tools/flags/flags.h"
#include "tools/stop_signals/stop_signals.h"

namespace {

// What --autocast buys on this CPU: 16-bit products are faster only on a kernel made for
// them (gemm_bf16.h); elsewhere the rounded operands go to the float32 GEMM.
std::string autocast_words(const std::string& autocast) {
  if (autocast == "bf16" && engine::bf16_kernel_outruns_float32())
    return "autocast bf16: products in bfloat16 on the " + engine::bf16_kernel_name() + " kernel";
  const std::string why = autocast == "bf16" ? "this CPU multiplies bfloat16 no faster than float32"
                                             : "there is no float16 kernel for the CPU";
  return "autocast " + autocast + ": " + why +
         ", so the rounded operands are multiplied by the float32 GEMM (expect no speed-up)";
}

}  // namespace

int main(int argc, char** argv) try {
  fmnist::TrainOptions o;
  o.progress = true;
  bool no_checkpoint = false;
  engine::Flags flags("train", "Trains an MLP or a small CNN on Fashion-MNIST in one process.");
  flags.add("--model", &o.model, {"mlp", "cnn"}, "the network");
  flags.add("--epochs", &o.epochs, 1, fmnist::kMaxEpochs, "epochs to train (in all, counting resumed ones)");
  flags.add("--batch", &o.batch_size, 1, 60000, "images per step");
  flags.add("--lr", &o.lr, 0, 100, "peak learning rate (default for adam: 0.001)");
  flags.add("--optimizer", &o.optimizer, {"sgd", "adam"}, "the optimizer");
  flags.add("--autocast", &o.autocast, {"off", "bf16", "fp16"}, "mixed precision: multiply in 16 bits");
  flags.add("--seed", &o.seed, "seed of the initial weights and the data order");
  flags.add("--train-limit", &o.train_limit, 0, 60000, "train on the first N images (0: all)");
  flags.add(
      "--checkpoint", &o.checkpoint,
      "where to save after each epoch, and where a run told to stop stops (default: checkpoints/MODEL.safetensors)");
  flags.add("--no-checkpoint", &no_checkpoint, "save nothing");
  flags.add("--resume", &o.resume, "continue from the checkpoint");
  flags.exclusive("--no-checkpoint", "--checkpoint");
  flags.exclusive("--no-checkpoint", "--resume");  // nothing to resume from
  flags.parse_or_exit(argc, argv);
  const bool lr_given = flags.given("--lr");
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
  std::unique_ptr<engine::nn::FileClaim> claim;  // another run saving to the same checkpoint: refused here
  if (!o.checkpoint.empty()) {
    engine::nn::check_save_path(o.checkpoint);  // now, not after the first epoch's training is lost at its save
    claim = std::make_unique<engine::nn::FileClaim>(o.checkpoint, "the checkpoint, --checkpoint");
    if (o.resume && !std::filesystem::exists(o.checkpoint))
      std::printf("--resume: no checkpoint at %s yet, so training starts at epoch 1\n", o.checkpoint.c_str());
  }
  std::printf("Fashion-MNIST, %s, %s lr %g, batch %lld, %d epochs, 1 process\n", o.model.c_str(), o.optimizer.c_str(),
              o.lr, (long long)o.batch_size, o.epochs);
  if (o.autocast != "off") std::printf("%s\n", autocast_words(o.autocast).c_str());
  std::fflush(stdout);  // before any error on stderr
  engine::catch_stop_signals();
  o.stop = [] { return engine::stop_signal_caught(); };
  int trained = 0;
  bool stopped = false;
  auto on_epoch = [&](const fmnist::EpochStats& s) {
    ++trained;
    const double loss = std::isnan(s.train_loss) ? std::nan("") : s.train_loss;  // "nan", never printf's "-nan"
    const std::string saved = o.checkpoint.empty() ? "" : "  (checkpoint saved)";
    if (s.samples_per_s > 0)
      std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  %8.0f samples/s%s\n", s.epoch, loss,
                  100 * s.test_accuracy, s.samples_per_s, saved.c_str());
    else  // resumed after the epoch's last step: its steps ran before
      std::printf("epoch %2d  loss %.4f  test accuracy %.2f%%  (its steps ran before the resume)%s\n", s.epoch, loss,
                  100 * s.test_accuracy, saved.c_str());
    std::fflush(stdout);
  };
  auto on_stop = [&](const fmnist::StopPoint& at) {
    stopped = true;
    std::printf("asked to stop by %s: stopped after batch %lld of %lld in epoch %d; %s\n",
                engine::stop_signal().c_str(), (long long)at.batch, (long long)at.batches, at.epoch,
                o.checkpoint.empty() ? "nothing was saved (--no-checkpoint)"
                                     : (o.checkpoint + " holds this step, and the same command with --resume "
                                                       "continues from it")
                                           .c_str());
    std::fflush(stdout);
  };
  auto model = fmnist::train(o, on_epoch, on_stop);
  if (stopped) return engine::kStoppedOnRequest;
  if (trained == 0) {
    std::printf("the checkpoint %s already holds all %d epochs; its test accuracy: %.2f%%\n", o.checkpoint.c_str(),
                o.epochs, 100 * fmnist::test_accuracy(*model));
  } else if (!o.checkpoint.empty()) {
    std::printf("checkpoint: %s (run again with --resume and more --epochs to continue)\n", o.checkpoint.c_str());
  }
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "train: %s\n", e.what());
  return 1;
}
