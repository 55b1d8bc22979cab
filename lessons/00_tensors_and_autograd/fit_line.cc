#include "lessons/00_tensors_and_autograd/fit_line.h"

#include "autograd/ops.h"
#include "tensor/ops.h"

namespace lesson0 {

using namespace engine;
using namespace engine::autograd;

FitResult fit_line(const FitOptions& options) {
  Generator gen(options.seed);
  // Data: a column of x values, and y = 3x - 2 plus a little noise.
  const Tensor x = rand({256, 1}, &gen) * 2.0 - 1.0;
  const Tensor y = x * 3.0 - 2.0 + randn({256, 1}, &gen) * 0.1;

  // Parameters: leaves that require grad, starting at zero.
  Variable w(zeros({1, 1}), /*requires_grad=*/true);
  Variable b(zeros({1}), /*requires_grad=*/true);

  FitResult result{};
  for (int step = 0; step < options.steps; ++step) {
    // Forward: the graph of this expression is recorded as it runs.
    Variable prediction = matmul(Variable(x), w) + b;
    Variable loss = mean(pow(prediction - Variable(y), 2.0));

    // Backward: fills w.grad() and b.grad() with d loss / d w and d loss / d b.
    loss.backward();

    // Update without recording a graph, then clear the gradients for the next step.
    {
      NoGradGuard no_grad;
      w.set_data(w.data() - w.grad() * options.lr);
      b.set_data(b.data() - b.grad() * options.lr);
    }
    w.zero_grad();
    b.zero_grad();

    result.losses.push_back(loss.item());
    if (options.on_step) options.on_step(step, loss.item(), w.data().item(), b.data().item());
  }
  result.w = w.data().item();
  result.b = b.data().item();
  return result;
}

}  // namespace lesson0
