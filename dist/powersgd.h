// PowerSGD (Vogels, Karimireddy & Jaggi, NeurIPS 2019): a DDP communication hook that
// sends a rank-r approximation of each gradient matrix instead of the matrix, with error
// feedback so that what is left out is sent in later steps. PyTorch's powerSGD_hook.
//
//   PowerSGDState state{.group = &group, .matrix_approximation_rank = 2, .start_powerSGD_iter = 10};
//   ddp.register_comm_hook([&state](GradBucket& b) { return powerSGD_hook(state, b); });
//   save_safetensors(path, state.state_dict());   // with the model's and optimizer's, to resume
//
// For a gradient M (n x m, each rank its own) and a shared Q (m x r):
//   P = M Q              all-reduce (sum) P: (n r) numbers instead of n m
//   P = orthonormalise the columns of P (Gram-Schmidt)
//   Q = M^T P            all-reduce (average) Q: (m r) numbers
//   M ~ P Q^T            = P P^T mean(M): mean(M) projected onto r directions
// With error feedback each rank adds last step's residual (M - its approximation) to this
// step's M first, so nothing is lost for good, only late. With warm start, Q is kept from
// the previous step (one power-iteration step per training step). Tensors not worth it
// (biases: (n + m) r * min_compression_rate >= n m) are all-reduced as they are, in one
// message per bucket. The first start_powerSGD_iter steps are plain all-reduce (training is
// sensitive early on, as the paper and PyTorch advise).
//
// Where this differs from PyTorch's hook (which turns both cases into NaN for good): a
// gradient that is exactly 0 is sent as 0 (Gram-Schmidt leaves its zero column alone, and
// a warm-start Q that became 0 is drawn again); a step whose gradients hold inf or NaN on
// any rank (float16 overflowing under a GradScaler) comes out NaN on every rank, so that
// the scaler skips it, and leaves the residual and Q as they were. Settings that would
// send nothing or NaN (rank 0, a NaN rate or epsilon) are refused at the first bucket.
#pragma once

#include <cstdint>
#include <map>

#include "dist/comm_hooks.h"
#include "nn/module.h"
#include "tensor/random.h"

namespace engine::dist {

struct PowerSGDState {
  ProcessGroup* group = nullptr;  // nullptr: the bucket's (DDP's) group
  int matrix_approximation_rank = 1;
  int start_powerSGD_iter = 1000;  // steps of plain all-reduce first
  double min_compression_rate = 2;
  bool use_error_feedback = true;
  bool warm_start = true;
  double orthogonalization_epsilon = 0;  // added to column norms (0: none, as PyTorch's default)
  uint64_t random_seed = 0;

  // Filled as training goes, the same on every rank except the residuals:
  int64_t iter = 0;  // training steps seen (counted at each step's last bucket)
  int64_t numel_before_compression = 0, numel_after_compression = 0;  // elements sent, summed over steps
  std::map<int, Tensor> error = {};            // per bucket: this rank's residual (of its own gradient)
  std::map<int, std::vector<Tensor>> qs = {};  // per bucket: each matrix's Q (warm start)
  Generator rng{random_seed};                  // draws every Q (declared after random_seed, so seeded by it)
  int rank = -1, world_size = 0;               // whose residuals these are (set by the first bucket)

  // What a checkpoint needs to resume exactly, as PyTorch pickles its PowerSGDState (every
  // field but the group): "iter", the two counters, "error.<bucket>" (residuals),
  // "q.<bucket>.<k>" (warm-start Qs), "rng" (the generator that draws new Qs), and the
  // settings as "settings.<name>", and "rank" and "world_size". Without it a resumed run
  // starts with no residual (what earlier steps held back is lost) and new Qs. The
  // residuals are each rank's own, so every rank saves its state and loads its own again
  // (a state loaded on another rank, or at another world size, is named at the first
  // bucket).
  nn::StateDict state_dict() const;
  // Refuses, naming the key, a state saved under other settings, a key it does not know,
  // and values no run could have made (a negative step, a residual that is not finite);
  // then nothing changes.
  void load_state_dict(const nn::StateDict& state);
};

Future powerSGD_hook(PowerSGDState& state, GradBucket& bucket);

// Orthonormalises the columns of `p` (n x r, contiguous) in place by Gram-Schmidt; epsilon
// is added to each norm before dividing. A column of zeros stays zeros (PyTorch's
// divides 0 by 0 there: NaN).
void orthogonalize(Tensor& p, double epsilon = 0);

}  // namespace engine::dist
