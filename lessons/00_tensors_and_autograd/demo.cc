// Lesson 0 demo: tensors, a recorded graph, and gradient descent finding a line.
//
//   bazel run //lessons/00_tensors_and_autograd:demo
#include <cstdio>
#include <iostream>

#include "autograd/ops.h"
#include "lessons/00_tensors_and_autograd/fit_line.h"
#include "tensor/gemm.h"
#include "tensor/ops.h"

using namespace engine;

int main() try {
  std::cout << "== Tensors: shape, strides, views ==\n";
  Tensor a = arange(0, 6).reshape({2, 3});
  std::cout << "a = " << a << "\n";
  std::cout << "a.transpose(0, 1) is a view (no copy): " << a.transpose(0, 1) << "\n\n";

  std::cout << "== Autograd: the graph is recorded during forward ==\n";
  autograd::Variable w(tensor({1, 2}), /*requires_grad=*/true);
  autograd::Variable loss = autograd::sum(w * w * 3.0);
  loss.backward();
  std::cout << "loss = sum(3 w^2) at w = [1, 2] is " << loss.item() << " (made by '" << loss.grad_fn_name()
            << "')\nd loss / d w = 6 w = " << w.grad() << "\n\n";

  std::cout << "== Gradient descent on y = 3x - 2 (matmul on the " << gemm_kernel_name() << " GEMM) ==\n";
  lesson0::FitOptions options;
  options.steps = 200;
  options.on_step = [](int step, double l, double wv, double bv) {
    if (step % 20 == 0 || step == 199) std::printf("step %3d  loss %.5f  w %.4f  b %.4f\n", step, l, wv, bv);
  };
  const lesson0::FitResult r = lesson0::fit_line(options);
  std::printf("\nlearned y = %.3f x %+.3f  (true line: y = 3x - 2)\n", r.w, r.b);
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "demo: %s\n", e.what());
  return 1;
}
