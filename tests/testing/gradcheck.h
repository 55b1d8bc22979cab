// One gradient-check helper shared by every test that checks a backward formula.
//
//   check_gradients("mul", [](const std::vector<Variable>& v) { return mul(v[0], v[1]); },
//                   {randn({3, 4}), randn({4})});
//
// It reduces the op's output to a scalar L = sum(out * W) with fixed random weights W (so
// every output element matters differently), runs backward, and compares each input's
// gradient with central finite differences (L(x + h) - L(x - h)) / 2h, element by element.
// float32 limits the accuracy of the differences to about 1e-3 relative; inputs are chosen
// by each test away from kinks (relu at 0, abs at 0, ...).
#pragma once

#include <functional>
#include <vector>

#include "autograd/ops.h"
#include "catch2/catch.hpp"
#include "tensor/ops.h"

namespace engine::testing {

using autograd::Variable;
using OpFn = std::function<Variable(const std::vector<Variable>&)>;

inline void check_gradients(const char* name, const OpFn& f, const std::vector<Tensor>& inputs, double h = 1e-2,
                            double tol = 2e-2) {
  std::vector<Variable> vars;
  for (const Tensor& t : inputs) vars.emplace_back(t.clone(), true);
  const Variable out = f(vars);
  Generator g(1234);
  const Tensor w = randn(out.shape(), &g);
  autograd::sum(autograd::mul(out, Variable(w))).backward();

  // L as a plain function of the inputs' values, computed in double.
  auto loss = [&](const std::vector<Variable>& v) {
    autograd::NoGradGuard no_grad;
    const Tensor o = f(v).data().contiguous();
    const std::vector<float> ov = o.to_vector<float>(), wv = w.contiguous().to_vector<float>();
    double s = 0;
    for (size_t i = 0; i < ov.size(); ++i) s += double(ov[i]) * wv[i];
    return s;
  };
  for (size_t k = 0; k < vars.size(); ++k) {
    const Tensor analytic = vars[k].grad();
    REQUIRE(analytic.defined());
    REQUIRE(analytic.shape() == inputs[k].shape());
    const std::vector<float> an = analytic.contiguous().to_vector<float>();
    for (int64_t i = 0; i < inputs[k].numel(); ++i) {
      std::vector<Variable> plus, minus;
      for (size_t j = 0; j < vars.size(); ++j) {
        Tensor p = inputs[j].clone(), m = inputs[j].clone();
        if (j == k) {
          p.data<float>()[i] += float(h);
          m.data<float>()[i] -= float(h);
        }
        plus.emplace_back(p);
        minus.emplace_back(m);
      }
      const double numeric = (loss(plus) - loss(minus)) / (2 * h);
      INFO(name << ": input " << k << " element " << i << " analytic " << an[i] << " numeric " << numeric);
      REQUIRE(std::abs(an[i] - numeric) <= tol * (1 + std::abs(numeric)));
    }
  }
}

}  // namespace engine::testing
