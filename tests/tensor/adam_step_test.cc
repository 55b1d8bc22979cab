// adam_step_ on the CPU against the update written out with scalars, bit for bit: Adam
// with and without its L2 weight decay, AdamW's decoupled decay, early steps (large bias
// corrections) and late ones, and lengths around the 16-float vectors of the AVX-512 loop
// (its tail lanes must neither read nor write past the tensors).
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/cpu_features.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"
#include "tensor/random.h"

using namespace engine;

namespace {

// PyTorch's Adam, one element (nn/adam.h): g' = g + wd p unless decoupled; p *= decay;
// m = b1 m + (1 - b1) g'; v = b2 v + (1 - b2) g'^2; p -= step m / (sqrt(v) / bc2 + eps).
// (Built with -ffp-contract=off: each product rounded before it is added.)
void reference_step(std::vector<float>& p, const std::vector<float>& g, std::vector<float>& m, std::vector<float>& v,
                    const AdamArgs& a) {
  for (size_t k = 0; k < p.size(); ++k) {
    float gk = g[k];
    if (!a.decoupled && a.weight_decay != 0) gk += a.weight_decay * p[k];
    p[k] *= a.decay;
    m[k] = a.beta1 * m[k] + (1 - a.beta1) * gk;
    v[k] = a.beta2 * v[k] + (1 - a.beta2) * gk * gk;
    p[k] -= a.step_size * m[k] / (std::sqrt(v[k]) / a.bias_correction2_sqrt + a.eps);
  }
}

AdamArgs args(float lr, float wd, bool decoupled, int step) {
  const float b1 = 0.9f, b2 = 0.999f;
  return {b1,
          b2,
          1e-8f,
          wd,
          float(lr / (1 - std::pow(double(b1), step))),
          float(std::sqrt(1 - std::pow(double(b2), step))),
          decoupled ? 1 - lr * wd : 1.0f,
          decoupled};
}

}  // namespace

TEST_CASE("adam_step_ equals the scalar update bit for bit: Adam, Adam with L2 decay, AdamW, every tail length") {
  manual_seed(12);
  const std::vector<AdamArgs> kinds = {args(1e-3f, 0, false, 1), args(1e-3f, 0.01f, false, 3),
                                       args(1e-2f, 0.1f, true, 1), args(1e-3f, 0, false, 1000)};
  for (const int64_t n : {1, 7, 15, 16, 17, 31, 33, 1000}) {
    for (const AdamArgs& a : kinds) {
      INFO("n " << n << " wd " << a.weight_decay << " decoupled " << a.decoupled << " step size " << a.step_size);
      // One float past the end of each tensor, to see that nothing writes there.
      Tensor p_all = randn({n + 1}), g_all = randn({n + 1}), m_all = randn({n + 1}) * 0.1, v_all = rand({n + 1}) * 0.01;
      Tensor p = p_all.narrow(0, 0, n), g = g_all.narrow(0, 0, n), m = m_all.narrow(0, 0, n), v = v_all.narrow(0, 0, n);
      std::vector<float> want_p = p.to_vector<float>(), want_m = m.to_vector<float>(), want_v = v.to_vector<float>();
      const std::vector<float> ends = {p_all.to_vector<float>()[size_t(n)], m_all.to_vector<float>()[size_t(n)],
                                       v_all.to_vector<float>()[size_t(n)]};
      reference_step(want_p, g.to_vector<float>(), want_m, want_v, a);
      adam_step_(p, g, m, v, a);
      REQUIRE(p.to_vector<float>() == want_p);
      REQUIRE(m.to_vector<float>() == want_m);
      REQUIRE(v.to_vector<float>() == want_v);
      REQUIRE(p_all.to_vector<float>()[size_t(n)] == ends[0]);
      REQUIRE(m_all.to_vector<float>()[size_t(n)] == ends[1]);
      REQUIRE(v_all.to_vector<float>()[size_t(n)] == ends[2]);
    }
  }
  if (!cpu_has_avx512()) WARN("the AVX-512 update was skipped: this CPU has no AVX-512 (the portable loop ran)");
}
