// sgd_step_ on the CPU against the update written out with scalars, bit for bit, for every
// kind of step (no momentum; momentum's first step and later ones; Nesterov; dampening and
// weight decay) and lengths around the 16-float vectors of the AVX-512 loop (its tail lanes
// must neither read nor write past the tensor).
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/cpu_features.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"
#include "tensor/optim_cpu.h"
#include "tensor/random.h"

using namespace engine;

namespace {

// PyTorch's SGD, one element: d = g + wd p; v = first ? d : m b + (1 - dampening) d; b = v;
// d = nesterov ? d + m v : v; p -= lr d. (This file is built with -ffp-contract=off, so
// each product is rounded before it is added, as in the engine's loops.)
void reference_step(std::vector<float>& p, const std::vector<float>& g, std::vector<float>* b, const SgdArgs& a) {
  for (size_t k = 0; k < p.size(); ++k) {
    float d = g[k] + a.weight_decay * p[k];
    if (b) {
      const float v = a.first ? d : a.momentum * (*b)[k] + (1 - a.dampening) * d;
      (*b)[k] = v;
      d = a.nesterov ? d + a.momentum * v : v;
    }
    p[k] -= a.lr * d;
  }
}

}  // namespace

TEST_CASE("sgd_step_ equals the scalar update bit for bit, every kind of step, every tail length") {
  manual_seed(11);
  const std::vector<SgdArgs> kinds = {
      {0.1f, 0, 0, 0, false, false},       {0.05f, 0.01f, 0, 0, false, false},    {0.1f, 0, 0.9f, 0, false, true},
      {0.1f, 0.5f, 0.9f, 0, false, false}, {0.03f, 0, 0.9f, 0.25f, false, false}, {0.1f, 0.5f, 0.9f, 0, true, true},
      {0.1f, 0.01f, 0.8f, 0, true, false},
  };
  for (const int64_t n : {1, 7, 15, 16, 17, 31, 33, 1000}) {
    for (const SgdArgs& a : kinds) {
      INFO("n " << n << " lr " << a.lr << " wd " << a.weight_decay << " momentum " << a.momentum << " dampening "
                << a.dampening << " nesterov " << a.nesterov << " first " << a.first);
      // One float past the end of each tensor, to see that nothing writes there.
      Tensor p_all = randn({n + 1}), g_all = randn({n + 1}), b_all = randn({n + 1});
      Tensor p = p_all.narrow(0, 0, n), g = g_all.narrow(0, 0, n), b = b_all.narrow(0, 0, n);
      std::vector<float> want_p = p.to_vector<float>(), want_b = b.to_vector<float>();
      const float p_end = p_all.to_vector<float>()[size_t(n)], b_end = b_all.to_vector<float>()[size_t(n)];
      reference_step(want_p, g.to_vector<float>(), a.momentum != 0 ? &want_b : nullptr, a);
      sgd_step_(p, g, &b, a);
      REQUIRE(p.to_vector<float>() == want_p);
      REQUIRE(b.to_vector<float>() == want_b);
      REQUIRE(p_all.to_vector<float>()[size_t(n)] == p_end);
      REQUIRE(b_all.to_vector<float>()[size_t(n)] == b_end);
    }
  }
  if (!cpu_has_avx512()) WARN("the AVX-512 update was skipped: this CPU has no AVX-512 (the portable loop ran)");
}
