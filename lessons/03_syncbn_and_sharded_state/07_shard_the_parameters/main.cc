// Lesson 3, step 7: shard the parameters (ZeRO-3, FSDP's FULL_SHARD). Now the parameters
// too live in shards: before each unit (a layer) runs, its shards are all-gathered, and
// after it they are released; backward gathers them once more. A rank holds 1/n of
// everything between steps, and at most two units unsharded at once (the one computing,
// the next one arriving). The price: 1.5x DDP's bytes on the wire.
//
//   bazel run //lessons/03_syncbn_and_sharded_state:07_shard_the_parameters
#include <algorithm>
#include <array>
#include <cstdio>
#include <vector>

#include "dist/ddp.h"
#include "dist/dist.h"
#include "lessons/03_syncbn_and_sharded_state/sharding.h"
#include "lessons/common/bars.h"
#include "lessons/common/lesson.h"
#include "nn/clip_grad.h"
#include "nn/loss.h"

using namespace engine;
using lesson3::Way;

namespace {

// Clipping needs the whole model's gradient norm, and a rank holds only its shards'
// gradients: its own norm is a part of the answer. FSDP's clip_grad_norm_ adds the parts
// (sums of squares) up over the ranks; DDP, whose every rank holds the whole averaged
// gradient, gives the reference. Returns (this rank's shards alone, FSDP's, DDP's).
std::array<double, 3> clipping_norms(dist::ProcessGroupTCP& g) {
  Tensor x, y;
  lessons::toy_batch(g.rank(), 32, 0, &x, &y);
  dist::FullyShardedDataParallel fsdp(lessons::toy_mlp(0), {.group = &g});
  nn::cross_entropy(fsdp(nn::Variable(x)), y).backward();
  const double own = nn::grad_norm_from_part(nn::grad_norm_part(fsdp.parameters(), 2), 2);
  const double sharded = fsdp.clip_grad_norm_(/*max_norm=*/1.0);
  dist::DistributedDataParallel ddp(lessons::toy_mlp(0), {.group = &g});
  nn::cross_entropy(ddp(nn::Variable(x)), y).backward();
  return {own, sharded, nn::clip_grad_norm_(ddp.parameters(), /*max_norm=*/1.0)};
}

}  // namespace

int main() try {
  dist::ProcessGroupTCP& g = lesson3::init_counting_bytes();
  const int rank = g.rank(), world = g.size();
  using S = dist::ShardingStrategy;
  const lesson3::Trained ddp = lesson3::train(Way::DDP, g), zero1 = lesson3::train(Way::ZeRO1, g);
  const lesson3::Trained zero2 = lesson3::train(Way::FSDP, g, {.sharding_strategy = S::SHARD_GRAD_OP});
  const lesson3::Trained zero3 = lesson3::train(Way::FSDP, g, {.sharding_strategy = S::FULL_SHARD});
  const double unit = (world - 1.0) / world * double(ddp.params_total);
  if (rank == 0) {
    std::printf("%d ranks, the toy MLP (S = %zu bytes of parameters), Adam, 5 steps:\n", world, ddp.params_total);
    for (const auto* t : {&ddp, &zero1, &zero2, &zero3})
      std::printf("  %s\n", lesson3::describe(*t, ddp, world).c_str());
    // The picture: bytes per rank for each, split into parameters, gradients, Adam state.
    lessons::BarChart chart;
    chart.title = "bytes per rank, " + std::to_string(world) + " ranks";
    chart.y_label = "MB";
    chart.segments = {"parameters (peak)", "gradients", "Adam state"};
    for (const auto* t : {&ddp, &zero1, &zero2, &zero3})
      chart.bars.push_back({t == &ddp     ? "DDP"
                            : t == &zero1 ? "ZeRO-1"
                            : t == &zero2 ? "ZeRO-2"
                                          : "ZeRO-3",
                            {t->params / 1e6, t->grads / 1e6, t->state / 1e6}});
    const std::string path = lessons::output_dir("03_syncbn_and_sharded_state") + "/memory_per_rank.png";
    chart.save_png(path);
    const std::string problem = lessons::check_bars_png(path, chart);
    std::printf("picture: %s (%s)\n", path.c_str(),
                problem.empty() ? "read back: every bar as drawn" : problem.c_str());
    lessons::report("picture_check", problem.empty() ? "ok" : problem);
  }
  const auto [own, sharded, whole] = clipping_norms(g);
  if (rank == 0)
    std::printf(
        "clip_grad_norm_(max_norm=1): rank 0's shards alone have norm %.6f; FSDP's, over every rank's shards, "
        "%.6f; DDP's whole gradient %.6f\n",
        own, sharded, whole);
  lessons::report("clip_own", own);
  lessons::report("clip_fsdp", sharded);
  lessons::report("clip_ddp", whole);
  lessons::report("zero3_vs_ddp", lesson3::max_abs_diff(zero3.weights, ddp.weights));
  lessons::report("zero3_sent_units", zero3.sent_per_step / unit);
  lessons::report("ddp_sent_units", ddp.sent_per_step / unit);
  lessons::report("zero3_params", double(zero3.params));
  lessons::report("zero3_grads", double(zero3.grads));
  lessons::report("zero3_state", double(zero3.state));
  lessons::report("ddp_total", double(ddp.params + ddp.grads + ddp.state));
  lessons::report("zero3_total", double(zero3.params + zero3.grads + zero3.state));
  lessons::report("params_total", double(ddp.params_total));
  // Units: the toy MLP's three Linear layers; forward gathers one and prefetches the next.
  std::vector<double> units;
  const auto toy = lessons::toy_mlp(0);
  for (auto& [name, child] : toy->children()) {
    double b = 0;
    for (auto& p : child->parameters()) b += double(p.data().nbytes());
    if (b > 0) units.push_back(b);
  }
  double two = 0;
  for (size_t i = 0; i + 1 < units.size(); ++i) two = std::max(two, units[i] + units[i + 1]);
  lessons::report("two_units", two);
  dist::destroy_process_group();
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "07_shard_the_parameters: %s\n", e.what());
  return 1;
}
