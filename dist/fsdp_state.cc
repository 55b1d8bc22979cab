// FSDP's state and clipping: what a rank saves, loads and clips when it holds only its
// shards. Full state is gathered unit by unit; sharded state carries which shard it is;
// the gradient norm adds the ranks' parts. The wrapper itself is in fsdp.cc.
#include <cmath>

#include "dist/fsdp.h"
#include "dist/fsdp_unit.h"
#include "dist/grad_norm.h"
#include "nn/clip_grad.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace engine::dist {

using nn::Variable;

nn::StateDict FullyShardedDataParallel::full_state_dict(bool rank0_only) {
  nn::StateDict out;
  const bool mine = !rank0_only || group_->rank() == 0;
  for (auto& u : units_) {
    const bool was_fresh = u->fresh;
    materialize(*u);
    if (mine)
      for (size_t i = 0; i < u->params.size(); ++i) out[u->names[i]] = u->params[i].data().clone();
    if (!was_fresh) release(*u);
  }
  if (mine)
    for (auto& [name, b] : buffers_) out[name] = b.clone();
  return out;
}

namespace {
constexpr const char* kShardRank = "_shard.rank";
constexpr const char* kShardCount = "_shard.count";
}  // namespace

double FullyShardedDataParallel::clip_grad_norm_(double max_norm, double norm_type) {
  const std::vector<Variable> shards = parameters();  // the padding's gradient is 0: it adds nothing
  const double part = nn::grad_norm_part(shards, norm_type);
  const double total = options_.sharding_strategy == ShardingStrategy::NO_SHARD
                           ? nn::grad_norm_from_part(part, norm_type)
                           : total_grad_norm(*shard_group_, part, norm_type);
  nn::scale_grads_to_norm_(shards, max_norm, total, norm_type, /*error_if_nonfinite=*/false);
  return total;
}

// Which shard this rank holds, and of how many: with NO_SHARD every rank holds the one whole
// copy; with HYBRID_SHARD ranks of different nodes at one position hold the same shard.
std::pair<int64_t, int64_t> FullyShardedDataParallel::shard_position() const {
  if (options_.sharding_strategy == ShardingStrategy::NO_SHARD) return {0, 1};
  return {shard_group_->rank(), shard_group_->size()};
}

nn::StateDict FullyShardedDataParallel::sharded_state_dict() const {
  nn::StateDict out;
  for (auto& [name, p] : named_parameters()) out[name] = p.data().clone();
  // Shards of one size but another rank would load without a shape error and train
  // nonsense; the state says whose it is.
  const auto [rank, count] = shard_position();
  out[kShardRank] = scalar_tensor(double(rank), DType::Int64);
  out[kShardCount] = scalar_tensor(double(count), DType::Int64);
  return out;
}

void FullyShardedDataParallel::load_sharded_state_dict(const nn::StateDict& state) {
  const auto [rank, count] = shard_position();
  const auto position = [&](const char* key) -> int64_t {
    auto it = state.find(key);
    ENGINE_REQUIRE(it != state.end() && it->second.numel() == 1 && it->second.dtype() == DType::Int64,
                   "[FSDP] the sharded state has no int64 \"", key, "\": it does not say which shard it holds");
    return int64_t(it->second.item());
  };
  const int64_t saved_rank = position(kShardRank), saved_count = position(kShardCount);
  ENGINE_REQUIRE(saved_rank == rank && saved_count == count, "[FSDP] this sharded state holds shard ", saved_rank,
                 " of ", saved_count, ", but this rank holds shard ", rank, " of ", count,
                 ": load each rank's own file, saved with the same world size");
  // Every check before any copy, so a refused state changes nothing.
  for (auto& [name, p] : named_parameters()) {
    auto it = state.find(name);
    ENGINE_REQUIRE(it != state.end(), "[FSDP] the sharded state has no \"", name, "\"");
    ENGINE_REQUIRE(it->second.shape() == p.shape(), "[FSDP] \"", name, "\" has shape ", shape_str(it->second.shape()),
                   " in the sharded state but ", shape_str(p.shape()),
                   " here: it was saved with another world size or model");
  }
  for (auto& [name, p] : named_parameters()) Tensor(p.data()).copy_(state.at(name));
  for (auto& u : units_) u->fresh = options_.sharding_strategy == ShardingStrategy::NO_SHARD;
}

}  // namespace engine::dist
