#include "dist/grad_norm.h"

#include <cmath>
#include <vector>

#include "nn/clip_grad.h"

namespace engine::dist {

double total_grad_norm(ProcessGroup& group, double part, double norm_type) {
  // [part, NaN seen]: sums for p-norms, the max for the inf-norm.
  const bool nan = std::isnan(part);
  Tensor t = from_vector(std::vector<float>{nan ? 0.0f : float(part), nan ? 1.0f : 0.0f});
  group.all_reduce(t, std::isinf(norm_type) ? ReduceOp::Max : ReduceOp::Sum).wait();
  return nn::grad_norm_from_part(t.at({1}) > 0 ? NAN : t.at({0}), norm_type);
}

}  // namespace engine::dist
