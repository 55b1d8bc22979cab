// The whole state of the recap's training, so that a job killed at any step and started
// again (by hand with --resume, or by `launch --max_restarts`) ends exactly where an
// uninterrupted one would: the model, the optimizer's momentum, where the data order is
// (epoch, and batches done in it: the DistributedSampler's order is a function of the
// seed and the epoch, so no generator state is needed), the step that sets the learning
// rate, and the curves so far. Rank 0 writes it as one safetensors file, atomically (a
// temporary, then a rename), whose metadata is the manifest: what was saved, by how many
// ranks, with which settings.
//
//   TrainingState s = load_training_state(path, settings, world);   // if the file exists
//   save_training_state(path, s, model.state_dict(), opt.state_dict(), settings, world);   // rank 0 only
#pragma once

#include <string>
#include <vector>

#include "lessons/common/curves.h"
#include "nn/safetensors.h"

namespace recap {

// What must match for a resume to continue the same run.
struct Settings {
  std::string model;
  int epochs = 0;
  int64_t batch = 0, train_limit = 0;
  double lr = 0;
  double warmup_epochs = 0;  // the learning rate rises linearly from 0 over these first epochs
};

// "model mlp, epochs 10, batch 64, train-limit 0, lr 0.1, warmup-epochs 0".
std::string settings_text(const Settings& settings);

// Every rank must train with the same settings: ranks started by hand, or one launcher per
// machine, can be given different flags, and a different learning rate on one rank would
// let the replicas drift apart without any error. Collective: compares a hash of the
// settings across the ranks and throws, naming this rank's, when they differ.
void require_same_settings(const Settings& settings);

struct TrainingState {
  int epoch = 0;                              // the epoch in progress (0-based)
  int64_t batch = 0;                          // batches of it already done
  int64_t step = 0;                           // optimizer steps in all
  double loss_sum = 0;                        // this rank's summed loss of this epoch so far (for its printed mean)
  std::vector<::lessons::EpochPoint> curves;  // the epochs finished
  engine::nn::StateDict model, optimizer;
};

// Every rank must start where the others start: a state file that only some ranks can read
// (on another machine's disk) would resume them while the rest started afresh, with other
// weights. Collective: compares (resumed, epoch, batch, step) across the ranks and throws,
// on every rank, naming what this one found at `path`, when they differ.
void require_same_start(const TrainingState& state, bool resumed, const std::string& path);

// Writes the state; call on rank 0 only (every rank holds the same replica). The ranks'
// loss sums differ (each saw its own data): `loss_sums` holds every rank's, gathered.
void save_training_state(const std::string& path, const TrainingState& s, const std::vector<double>& loss_sums,
                         const engine::nn::StateDict& model, const engine::nn::StateDict& optimizer,
                         const Settings& settings);

// Collective: every rank's loss sum, in rank order, bit for bit (each rank saw its own data).
// `device` is the group's: the CPU for gloo, this rank's GPU for nccl.
std::vector<double> gather_loss_sums(double mine, engine::Device device);

// Reads a state saved by save_training_state, checking it against this run: another model,
// batch, data or schedule is refused naming both values; another world size is refused in
// the middle of an epoch (the ranks' slices of the data would not line up), and allowed
// at an epoch's end.
TrainingState load_training_state(const std::string& path, const Settings& settings, int world_size, int rank);

}  // namespace recap
