#include "dist/same_data.h"

#include <cstdio>
#include <cstring>

#include "dist/hash_bytes.h"
#include "dist/same_model.h"
#include "tensor/check.h"
#include "tensor/ops.h"

namespace engine::dist {

uint64_t hash_bytes(const Tensor& t, uint64_t h) {
  const Tensor c = t.contiguous().to(Device::cpu());
  return hash_bytes(c.bytes(), c.nbytes(), h);
}

uint64_t fingerprint(const Tensor& t) {
  // The dtype and shape first, so that a reshaped or retyped copy of the same bytes differs.
  std::vector<int64_t> head{int64_t(t.dtype())};
  for (int64_t d : t.shape()) head.push_back(d);
  return hash_bytes(t, hash_bytes(from_vector(head), 0));
}

void require_same_data(ProcessGroup& group, const Tensor& inputs, const Tensor& targets, const std::string& what) {
  const uint64_t in = fingerprint(inputs), out = fingerprint(targets);
  int64_t mine[2];
  std::memcpy(&mine[0], &in, 8);
  std::memcpy(&mine[1], &out, 8);
  std::vector<int64_t> low, high;
  if (same_on_every_rank(group, {inputs.size(0), mine[0], mine[1]}, &low, &high)) return;
  char print[40];
  std::snprintf(print, sizeof print, "0x%016llx/%016llx", static_cast<unsigned long long>(in),
                static_cast<unsigned long long>(out));
  const bool sizes_differ = low[0] != high[0];
  ENGINE_REQUIRE(false, what, " differs between the ranks: rank ", group.rank(), " has ", inputs.size(0),
                 " samples, fingerprint ", print,
                 sizes_differ
                     ? " (sample counts range over " + std::to_string(low[0]) + ".." + std::to_string(high[0]) + ")"
                     : " (the same count on every rank, other contents)",
                 ". A DistributedSampler gives each rank its slice of one dataset: every rank, on every machine, "
                 "must read the same files (compare them, e.g. with sha256sum)");
}

}  // namespace engine::dist
