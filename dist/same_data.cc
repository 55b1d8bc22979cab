#include "dist/same_data.h"

#include <cstdio>
#include <cstring>

#include "dist/same_model.h"
#include "tensor/check.h"

namespace engine::dist {

uint64_t fingerprint(const Tensor& t) {
  const Tensor c = t.contiguous();
  ENGINE_REQUIRE(!c.device().is_cuda(), "[fingerprint] takes a CPU tensor (a dataset as loaded)");
  // FNV-1a's constants, taken a word at a time: each 8 bytes are mixed in with one xor and
  // one multiply, and the shape and dtype first, so that a reshaped copy differs too.
  uint64_t h = 1469598103934665603ull;
  auto mix = [&h](uint64_t w) { h = (h ^ w) * 1099511628211ull, h ^= h >> 29; };
  mix(uint64_t(c.dtype()));
  for (int64_t d : c.shape()) mix(uint64_t(d));
  const auto* bytes =
      static_cast<const unsigned char*>(c.storage()->data()) + c.offset() * int64_t(dtype_size(c.dtype()));
  const size_t n = size_t(c.nbytes());
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, bytes + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  std::memcpy(&tail, bytes + i, n - i);
  mix(tail ^ (uint64_t(n - i) << 56));
  return h;
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
