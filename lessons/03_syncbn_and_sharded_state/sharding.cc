#include "lessons/03_syncbn_and_sharded_state/sharding.h"

#include <cstdio>
#include <cstdlib>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "dist/zero.h"
#include "lessons/common/lesson.h"
#include "nn/adam.h"
#include "nn/loss.h"
#include "tensor/ops.h"

using namespace engine;
using namespace engine::nn;

namespace lesson3 {

namespace {

size_t grad_bytes(const std::vector<Variable>& ps) {
  size_t b = 0;
  for (auto& p : ps) b += p.grad().defined() ? p.grad().nbytes() : 0;
  return b;
}

size_t state_bytes(const StateDict& s) {
  size_t b = 0;
  for (auto& [k, t] : s)
    if (k.rfind("state.", 0) == 0) b += t.nbytes();
  return b;
}

uint64_t sent(dist::ProcessGroup* g) {
  auto* tcp = dynamic_cast<dist::ProcessGroupTCP*>(g);
  return tcp ? tcp->bytes_sent() : 0;
}

}  // namespace

dist::ProcessGroupTCP& init_counting_bytes() {
  setenv("ENGINE_ALLREDUCE", "ring", /*overwrite=*/0);
  dist::init_process_group("gloo");
  return dynamic_cast<dist::ProcessGroupTCP&>(dist::default_group());
}

Trained train(Way way, dist::ProcessGroupTCP& group, dist::FSDPOptions fsdp_options, int steps) {
  const int rank = group.rank(), world = group.size();
  Trained t;
  auto model = lessons::toy_mlp(0);
  for (auto& p : model->parameters()) t.params_total += p.data().nbytes();
  std::unique_ptr<dist::DistributedDataParallel> ddp;
  std::unique_ptr<dist::FullyShardedDataParallel> fsdp;
  std::unique_ptr<dist::ZeroRedundancyOptimizer> zero;
  std::unique_ptr<Adam> adam;
  Module* net = model.get();
  if (way == Way::DDP) {
    ddp = std::make_unique<dist::DistributedDataParallel>(model, dist::DDPOptions{.group = &group});
    adam = std::make_unique<Adam>(ddp->parameters(), AdamOptions{.lr = 1e-3});
    net = ddp.get();
    t.name = "DDP";
  } else if (way == Way::ZeRO1) {
    dist::ZeroOptions zo;
    zo.adam = {.lr = 1e-3};
    zo.group = &group;
    zero = std::make_unique<dist::ZeroRedundancyOptimizer>(model->parameters(), dist::ZeroOptimizer::Adam, zo);
    t.name = "ZeRO-1";
  } else {
    fsdp_options.group = &group;
    fsdp = std::make_unique<dist::FullyShardedDataParallel>(model, fsdp_options);
    fsdp->reset_peak_memory();  // building the flat buffers held everything once: setup, not training
    adam = std::make_unique<Adam>(fsdp->parameters(), AdamOptions{.lr = 1e-3});
    net = fsdp.get();
    t.name = std::string("FSDP ") + dist::sharding_strategy_name(fsdp_options.sharding_strategy);
  }
  // Bytes sent in every group this rank is in: FSDP's HYBRID_SHARD has two of its own.
  dist::ProcessGroup* within = fsdp ? fsdp->shard_group() : nullptr;
  dist::ProcessGroup* across = fsdp ? fsdp->replicate_group() : nullptr;
  auto all_sent = [&] {
    return sent(&group) + (within && within != &group ? sent(within) : 0) + (across ? sent(across) : 0);
  };
  const uint64_t before = all_sent(), before_across = sent(across);
  for (int step = 0; step < steps; ++step) {
    Tensor x, y;
    lessons::toy_batch(step * world + rank, 32, 0, &x, &y);
    if (zero)
      zero->zero_grad();
    else
      adam->zero_grad();
    cross_entropy((*net)(Variable(x)), y).backward();
    t.grads = grad_bytes(fsdp ? fsdp->parameters() : model->parameters());
    if (zero)
      zero->step();
    else
      adam->step();
  }
  t.sent_per_step = double(all_sent() - before) / steps;
  t.sent_across = double(sent(across) - before_across) / steps;
  if (fsdp) {
    const dist::FSDPMemory m = fsdp->memory();
    t.params = m.sharded_params + m.full_params_peak;
    t.weights = fsdp->full_state_dict(/*rank0_only=*/false);
  } else {
    t.params = t.params_total;
    t.weights = model->state_dict();
    for (auto& [k, v] : t.weights) v = v.clone();
  }
  t.state = zero ? zero->state_bytes() : state_bytes(adam->state_dict());
  return t;
}

double max_abs_diff(const StateDict& a, const StateDict& b) {
  double worst = 0;
  for (auto& [k, t] : a) {
    auto it = b.find(k);
    if (it == b.end()) continue;
    if (t.shape() != it->second.shape()) return 1e9;
    worst = std::max(worst, max(abs(t - it->second)).item());
  }
  return worst;
}

std::string describe(const Trained& t, const Trained& ddp, int world) {
  const double unit = (world - 1.0) / world * double(t.params_total);
  char sent[64] = "nothing (1 rank)";  // (n-1)/n S is 0: no ratio to show
  if (world > 1) std::snprintf(sent, sizeof sent, "%.2f x (n-1)/n S a step", t.sent_per_step / unit);
  char s[400];
  std::snprintf(s, sizeof s,
                "%-24s weights vs DDP %.1e | sent %s | held: parameters %.2f MB, gradients %.2f MB, Adam state "
                "%.2f MB",
                t.name.c_str(), max_abs_diff(t.weights, ddp.weights), sent, t.params / 1e6, t.grads / 1e6,
                t.state / 1e6);
  return s;
}

}  // namespace lesson3
