// Training on Fashion-MNIST in one process: the program every distributed lesson starts
// from. DDP (lesson 2) wraps exactly this model and this loop.
//
//   TrainOptions o;
//   o.model = "cnn";
//   o.epochs = 3;
//   train(o, [](const EpochStats& s) { std::cout << s.epoch << " " << s.test_accuracy << "\n"; });
//
// With a checkpoint path the model, optimizer and sampler state are saved (atomically, as
// safetensors) after every epoch; with resume, training continues from the saved epoch and
// ends exactly where an uninterrupted run would. A run told to stop (o.stop returns true,
// asked after every step) saves where it is, in the middle of its epoch, and returns; a
// resumed run continues from that very step.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "nn/module.h"
#include "nn/safetensors.h"

namespace fmnist {

// The most epochs a run (and so a checkpoint's "epoch") may hold.
constexpr int kMaxEpochs = 1000000;

struct TrainOptions {
  std::string model = "mlp";      // "mlp" (784-256-256-10) or "cnn"
  std::string optimizer = "sgd";  // "sgd" (momentum 0.9) or "adam"
  int epochs = 3;
  int64_t batch_size = 64;
  double lr = 0.05;  // peak learning rate; decays to 0 along a cosine over the run
  uint64_t seed = 0;
  int64_t train_limit = 0;       // use only the first N training images (0: all 60,000)
  int64_t test_limit = 0;        // evaluate on the first N test images (0: all 10,000)
  std::string checkpoint;        // save here after each epoch (empty: no checkpoint)
  bool resume = false;           // continue from `checkpoint` if it exists
  bool progress = false;         // a progress line on stderr during each epoch
  std::string autocast = "off";  // "bf16" or "fp16": forward under nn::Autocast (fp16 adds a GradScaler)
  double init_scale = 65536;     // fp16: the GradScaler's first loss scale (saved with the checkpoint)
  std::function<bool()> stop;    // asked after every step: true stops the run there, saved (null: never)
};

// Where a run told to stop stopped: after batch `batch` of `batches` of epoch `epoch`.
struct StopPoint {
  int epoch;  // 1-based
  int64_t batch, batches;
};

struct EpochStats {
  int epoch;             // 1-based
  double train_loss;     // mean over the epoch's batches
  double test_accuracy;  // fraction in [0, 1]
  double samples_per_s;  // training throughput over the epoch's steps in this run (0: none)
};

std::shared_ptr<engine::nn::Module> make_model(const std::string& name, uint64_t seed);

// Trains and evaluates; calls on_epoch after each epoch, and on_stop where options.stop
// stopped the run. Returns the model as it is at the end (or at the stop).
std::shared_ptr<engine::nn::Module> train(const TrainOptions& options,
                                          const std::function<void(const EpochStats&)>& on_epoch,
                                          const std::function<void(const StopPoint&)>& on_stop = nullptr);

// The epoch a checkpoint was saved after, read strictly from its metadata: an integer in
// [0, kMaxEpochs], or an engine::Error that names the file and the key.
int checkpoint_epoch(const engine::nn::Metadata& meta, const std::string& path);

// The name of the model's first parameter or buffer that holds NaN or inf ("" when every
// value is finite). A run whose weights reach NaN (a learning rate too high) cannot come
// back: every later step is NaN too. The trainers stop there, before saving over the last
// good checkpoint.
std::string first_non_finite(const engine::nn::Module& model);

// Fraction of `limit` test images (0: all) the model classifies correctly.
double test_accuracy(engine::nn::Module& model, int64_t limit = 0);

}  // namespace fmnist
