#include "data/sampler.h"

#include <algorithm>
#include <cstddef>
#include <numeric>
#include <utility>

#include "tensor/check.h"

namespace engine::data {

std::vector<int64_t> random_permutation(int64_t n, Generator& gen) {
  std::vector<int64_t> p(size_t(std::max<int64_t>(n, 0)));
  std::iota(p.begin(), p.end(), 0);
  // Fisher-Yates: position i takes a uniformly chosen element of the not-yet-placed rest.
  for (int64_t i = n - 1; i > 0; --i) std::swap(p[i], p[gen.randint(0, i + 1)]);
  return p;
}

namespace {
int64_t checked_size(int64_t n, const char* sampler) {
  ENGINE_REQUIRE(n >= 0, "[", sampler, "] dataset size must be >= 0, got ", n);
  return n;
}
}  // namespace

SequentialSampler::SequentialSampler(int64_t n) : n_(checked_size(n, "SequentialSampler")) {}
RandomSampler::RandomSampler(int64_t n, uint64_t seed) : n_(checked_size(n, "RandomSampler")), gen_(seed) {}

std::vector<int64_t> SequentialSampler::indices() {
  std::vector<int64_t> p(size_t(std::max<int64_t>(n_, 0)));
  std::iota(p.begin(), p.end(), 0);
  return p;
}

std::vector<int64_t> RandomSampler::indices() { return random_permutation(n_, gen_); }

}  // namespace engine::data
