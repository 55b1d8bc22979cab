// What the recap writes for its PyTorch twin (--twin DIR; lesson 2, step 14): enough for
// torch_twin.py to run the same training in PyTorch, step for step, and compare.
//
//   DIR/run.json              the settings (model, epochs, batch, lr, momentum, world size,
//                             data slice and normalisation, steps per epoch)
//   DIR/init.safetensors      the weights at step 0, after DDP's broadcast (rank 0)
//   DIR/order_rank{r}.txt     rank r's sample indices, one line per epoch, in batch order
//   DIR/losses_rank{r}.txt    rank r's loss at every step
//   DIR/final.safetensors     the weights at the end (rank 0)
#pragma once

#include <string>
#include <vector>

#include "lessons/02_ddp_basics/13_recap/training_state.h"
#include "nn/module.h"

namespace recap {

class TwinRecorder {
 public:
  // dir empty: records nothing.
  TwinRecorder(std::string dir, int rank, int world);
  bool on() const { return !dir_.empty(); }
  // Rank 0 writes the step-0 weights and run.json.
  void start(engine::nn::Module& model, const Settings& settings, int64_t train_size, int64_t steps_per_epoch);
  void epoch_order(const std::vector<int64_t>& indices);
  void step_loss(double loss) { losses_.push_back(loss); }
  void finish(engine::nn::Module& model);  // every rank writes its files; rank 0 the final weights

 private:
  std::string dir_;
  int rank_, world_;
  std::vector<std::vector<int64_t>> orders_;
  std::vector<double> losses_;
};

}  // namespace recap
