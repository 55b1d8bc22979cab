// A small, seedable random generator (PCG32) with the distributions the engine needs.
// The same seed gives the same numbers on every machine and compiler: nothing here uses
// std::*_distribution, whose output the C++ standard leaves to each library.
//
//   Generator g(42);
//   float u = g.uniform();          // in [0, 1)
//   float n = g.normal();           // mean 0, std 1 (Box-Muller)
//   int64_t k = g.randint(0, 10);   // in [0, 10)
//   manual_seed(0);                 // reseeds the default generator
//   Tensor r = rand({3});           // draws from it (under its lock: threads may share it)
#pragma once

#include <cstdint>
#include <functional>

namespace engine {

class Generator {
 public:
  explicit Generator(uint64_t seed = 0) { seed_with(seed); }
  void seed_with(uint64_t seed);

  uint32_t next_u32();
  float uniform();                             // [0, 1), 24 random bits
  float normal();                              // standard normal
  int64_t randint(int64_t low, int64_t high);  // [low, high), unbiased

  // The full state, so a checkpoint can save and restore a generator exactly.
  struct State {
    uint64_t state, inc;
    bool has_spare;
    float spare;
  };
  State get_state() const { return {state_, inc_, has_spare_, spare_}; }
  void set_state(const State& s);

 private:
  uint64_t state_ = 0, inc_ = 1;
  bool has_spare_ = false;  // Box-Muller makes normals in pairs; the second waits here
  float spare_ = 0;
};

// The generator used when an op is not given one: one per process, as PyTorch's, shared by
// the process's threads, so it is only reached under its lock. with_generator(gen, use)
// runs use(*gen), or use(the default generator) holding that lock when gen is null.
void with_generator(Generator* gen, const std::function<void(Generator&)>& use);
void manual_seed(uint64_t seed);  // reseeds the default generator

}  // namespace engine
