// What lesson 3's sharding steps (6, 7, 8) share: the toy MLP trained a few steps with Adam
// on this rank's batches by DDP, ZeRO-1 or FSDP, with what each rank sent and held.
//
//   Trained t = train(Way::FSDP, g, {.sharding_strategy = ShardingStrategy::FULL_SHARD});
//   max_abs_diff(t.weights, train(Way::DDP, g).weights);   // ~1e-7: the same training
#pragma once

#include <string>

#include "dist/fsdp.h"
#include "dist/tcp_group.h"
#include "nn/module.h"

namespace lesson3 {

// init_process_group("gloo") with the ring forced (ENGINE_ALLREDUCE=ring, unless set): on
// one machine all_reduce would take shared memory, where no socket counts the bytes.
engine::dist::ProcessGroupTCP& init_counting_bytes();

enum class Way { DDP, ZeRO1, FSDP };

struct Trained {
  std::string name;
  engine::nn::StateDict weights;  // unsharded, on every rank
  double sent_per_step = 0;       // bytes this rank sent per step, in every group it is in
  double sent_across = 0;         // HYBRID_SHARD: of which between machines
  size_t params = 0;              // bytes at the peak: parameters held (shards + gathered)
  size_t grads = 0;               // gradients held after backward (until the step)
  size_t state = 0;               // Adam's state held
  size_t params_total = 0;        // the model's parameters, in bytes (S)
};

Trained train(Way way, engine::dist::ProcessGroupTCP& group, engine::dist::FSDPOptions fsdp = {}, int steps = 5);

// The largest |a - b| over every tensor. Adam moves a weight by about lr = 1e-3 a step:
// sums taken in another order (a reduce-scatter, two stages of averages) differ in the last
// bits, and Adam's division by sqrt(v) magnifies that where a gradient is near 0; 1e-5 is
// 1% of one step, while a missed or doubled step moves weights by whole steps.
double max_abs_diff(const engine::nn::StateDict& a, const engine::nn::StateDict& b);

// "DDP: weights vs DDP 0.0e+00 | sent 2.00 (n-1)/n S per step | held: ..." for the step's table.
std::string describe(const Trained& t, const Trained& ddp, int world);

}  // namespace lesson3
