// What the recap writes for its PyTorch twin (--twin DIR; lesson 2, step 14): enough for
// torch_twin.py to run the same training in PyTorch, step for step, and compare.
//
//   DIR/run.json              the settings (model, epochs, batch, lr, momentum, world size,
//                             data slice and normalisation, steps per epoch)
//   DIR/init.safetensors      the weights at step 0, after DDP's broadcast (rank 0)
//   DIR/order_rank{r}.txt     rank r's sample indices, one line per epoch, in batch order
//   DIR/losses_rank{r}.txt    rank r's loss at every step
//   DIR/final.safetensors     the weights at the end (rank 0)
//   DIR/probe_step{N}.safetensors  at four steps N spread over the run (run.json's
//                             "probe_steps"), rank 0's whole state before step N
//                             ("before.*" weights, "optimizer.*" momentum) and its weights
//                             after it ("after.*"): the twin takes one step from that same
//                             state, to show that each step agrees even where the two
//                             free-running curves have drifted apart
#pragma once

#include <string>
#include <vector>

#include "lessons/02_ddp_basics/13_recap/training_state.h"
#include "nn/module.h"
#include "nn/optimizer.h"

namespace recap {

class TwinRecorder {
 public:
  // dir empty: records nothing.
  TwinRecorder(std::string dir, int rank, int world);
  bool on() const { return !dir_.empty(); }
  // Rank 0 writes the step-0 weights and run.json.
  void start(engine::nn::Module& model, const Settings& settings, int64_t train_size, int64_t steps_per_epoch);
  void epoch_order(const std::vector<int64_t>& indices);
  // Around optimizer step `step` (0-based, counted over the whole run): rank 0 keeps the
  // state before a probe step and writes it with the weights after.
  void before_step(int64_t step, const engine::nn::Module& model, const engine::nn::Optimizer& opt);
  void after_step(int64_t step, const engine::nn::Module& model);
  void step_loss(double loss) { losses_.push_back(loss); }
  void finish(engine::nn::Module& model);  // every rank writes its files; rank 0 the final weights

 private:
  std::string dir_;
  int rank_, world_;
  std::vector<std::vector<int64_t>> orders_;
  std::vector<double> losses_;
  std::vector<int64_t> probe_steps_;
  engine::nn::StateDict before_;  // the probe step's state, copied before the step
};

}  // namespace recap
