#include "tensor/random.h"

#include <cmath>
#include <mutex>

#include "tensor/check.h"

namespace engine {

// PCG32 (O'Neill, 2014): a 64-bit linear congruential state, output permuted by an
// xorshift and a data-dependent rotation. Small, fast, and statistically solid.
void Generator::seed_with(uint64_t seed) {
  state_ = 0;
  inc_ = (seed << 1u) | 1u;  // the increment must be odd
  next_u32();
  state_ += 0x853c49e6748fea9bULL ^ seed;
  next_u32();
  has_spare_ = false;
}

uint32_t Generator::next_u32() {
  const uint64_t old = state_;
  state_ = old * 6364136223846793005ULL + inc_;
  const uint32_t xorshifted = uint32_t(((old >> 18u) ^ old) >> 27u);
  const uint32_t rot = uint32_t(old >> 59u);
  return (xorshifted >> rot) | (xorshifted << ((-rot) & 31));
}

float Generator::uniform() { return float(next_u32() >> 8) * (1.0f / 16777216.0f); }

float Generator::normal() {
  if (has_spare_) {
    has_spare_ = false;
    return spare_;
  }
  // Box-Muller: two uniforms u1 in (0,1], u2 in [0,1) give two independent normals
  // r*cos(theta) and r*sin(theta), with r = sqrt(-2 ln u1) and theta = 2 pi u2.
  const double u1 = 1.0 - double(next_u32()) / 4294967296.0;
  const double u2 = double(next_u32()) / 4294967296.0;
  const double r = std::sqrt(-2.0 * std::log(u1));
  const double theta = 6.283185307179586 * u2;
  spare_ = float(r * std::sin(theta));
  has_spare_ = true;
  return float(r * std::cos(theta));
}

int64_t Generator::randint(int64_t low, int64_t high) {
  ENGINE_REQUIRE(high > low, "[randint] empty range [", low, ", ", high, ")");
  // In unsigned arithmetic: high - low passes int64 for a range wider than 2^63.
  const uint64_t range = uint64_t(high) - uint64_t(low);
  // Rejection sampling on 64 random bits removes the modulo bias.
  const uint64_t limit = UINT64_MAX - UINT64_MAX % range;
  uint64_t x;
  do {
    x = (uint64_t(next_u32()) << 32) | next_u32();
  } while (x >= limit);
  return int64_t(uint64_t(low) + x % range);  // lands in [low, high), so it fits
}

void Generator::set_state(const State& s) {
  state_ = s.state;
  inc_ = s.inc | 1u;
  has_spare_ = s.has_spare;
  spare_ = s.spare;
}

void with_generator(Generator* gen, const std::function<void(Generator&)>& use) {
  if (gen) return use(*gen);
  static Generator default_generator(0);
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  use(default_generator);
}

void manual_seed(uint64_t seed) {
  with_generator(nullptr, [seed](Generator& g) { g.seed_with(seed); });
}

}  // namespace engine
