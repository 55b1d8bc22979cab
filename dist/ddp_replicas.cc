// DistributedDataParallel's check that the replicas are still identical (ddp.h).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <iomanip>
#include <sstream>

#include "autograd/variable.h"
#include "dist/ddp.h"
#include "dist/same_data.h"
#include "dist/same_model.h"
#include "tensor/ops.h"

namespace engine::dist {

void DistributedDataParallel::check_replicas_if_due() {
  if (!options_.check_replicas || group_->size() == 1 || !autograd::is_grad_enabled()) return;
  ++forwards_;
  if ((forwards_ & (forwards_ - 1)) == 0) check_replicas();  // 1, 2, 4, 8, ...
}

// One all-reduce of a vector holding this rank's hash of every parameter in its own slot;
// on a mismatch, the parameters' own hashes find the first that differs, rank 0's values
// of it are broadcast, and each rank's largest difference from them is gathered.
void DistributedDataParallel::check_replicas() {
  const int world = group_->size(), rank = group_->rank();
  uint64_t h = 0x9e3779b97f4a7c15ull;
  for (const auto& p : params_) h = hash_bytes(p.data(), h);
  std::vector<int64_t> slots(size_t(world), 0);
  std::memcpy(&slots[size_t(rank)], &h, sizeof h);
  Tensor all = from_vector(slots);
  group_->all_reduce(all, ReduceOp::Sum).wait();
  const std::vector<int64_t> hashes = all.to_vector<int64_t>();
  if (std::all_of(hashes.begin(), hashes.end(), [&](int64_t v) { return v == hashes[0]; })) return;

  std::vector<int64_t> mine, low, high;
  for (const auto& p : params_) mine.push_back(int64_t(hash_bytes(p.data(), 0)));
  same_on_every_rank(*group_, mine, &low, &high);
  size_t first = 0, differ = 0;
  for (size_t i = params_.size(); i-- > 0;)
    if (low[i] != high[i]) first = i, ++differ;
  Tensor root = params_[first].data().contiguous().to(Device::cpu()).clone();
  group_->broadcast(root, 0).wait();
  const Tensor here = params_[first].data().to(Device::cpu()).to(DType::Float32);
  std::vector<float> gap(size_t(2 * world), 0.0f);  // per rank: largest |difference|, largest |value|
  gap[size_t(2 * rank)] = float(max(abs(here - root.to(DType::Float32))).item());
  gap[size_t(2 * rank + 1)] = float(max(abs(here)).item());
  Tensor gaps = from_vector(gap);
  group_->all_reduce(gaps, ReduceOp::Sum).wait();
  const std::vector<float> g = gaps.to_vector<float>();
  int worst = 0;
  float scale = 0;
  for (int r = 0; r < world; ++r) {
    if (!(g[size_t(2 * r)] <= g[size_t(2 * worst)])) worst = r;  // a NaN difference is the worst
    scale = std::max(scale, g[size_t(2 * r + 1)]);
  }
  const float diff = g[size_t(2 * worst)];
  std::ostringstream w;
  w << std::setprecision(3) << "parameter \"" << names_[first] << "\" on rank " << worst << " is up to " << diff
    << " from rank 0's (" << differ << " of " << params_.size() << " parameters differ)";
  const std::string where = w.str();
  // A few rounding errors: the machines round differently (their CPUs run other kernels).
  // The replicas are made identical again; anything larger is a mistake to name.
  if (std::isfinite(diff) && diff <= 1e-5f * (1 + scale)) {
    if (rank == 0)
      std::fprintf(stderr,
                   "[DistributedDataParallel] the replicas differ by rounding at training forward %lld: %s. The "
                   "machines' kernels may round differently; rank 0's weights are broadcast again (said each time)\n",
                   (long long)forwards_, where.c_str());
    for (auto& p : params_) group_->broadcast(p.data(), 0).wait();
    return;
  }
  throw Error("[DistributedDataParallel] the replicas differ at training forward " + std::to_string(forwards_) + ": " +
              where +
              ". DDP keeps them identical only while every rank changes its weights the same way; the usual causes: "
              "a checkpoint loaded on some ranks only after wrapping (load it on every rank, or before wrapping: "
              "DDP broadcasts rank 0's), an optimizer whose state differs between ranks (after a Join, give it to "
              "the Join: JoinSync), a learning rate that differs between ranks (a schedule computed from a "
              "dataset whose length differs: on several machines, a copy of the files that differs), weights "
              "changed on one rank alone, or a machine running another build of the program (init_process_group "
              "warned of it at start-up)");
}

}  // namespace engine::dist
