#include "dist/same_model.h"

#include <algorithm>

#include "tensor/ops.h"

namespace engine::dist {

bool same_on_every_rank(ProcessGroup& group, const std::vector<int64_t>& mine, std::vector<int64_t>* low,
                        std::vector<int64_t>* high) {
  Tensor lo = from_vector(mine), hi = from_vector(mine);
  group.all_reduce(lo, ReduceOp::Min).wait();
  group.all_reduce(hi, ReduceOp::Max).wait();
  const std::vector<int64_t> l = lo.to_vector<int64_t>(), h = hi.to_vector<int64_t>();
  if (low) *low = l;
  if (high) *high = h;
  return l == h;
}

void check_same_parameters(ProcessGroup& group, const std::vector<nn::Variable>& params,
                           const std::vector<std::string>& names, const std::string& who) {
  // First the parameter count, total size and most dims (one fixed-size message)...
  int64_t total = 0, dims = 0;
  for (auto& p : params) total += p.numel(), dims = std::max<int64_t>(dims, p.dim());
  std::vector<int64_t> low, high;
  ENGINE_REQUIRE(same_on_every_rank(group, {int64_t(params.size()), total, dims}, &low, &high), who,
                 " the model differs between ranks: parameter counts range over ", low[0], "..", high[0],
                 " and sizes over ", low[1], "..", high[1], " elements; every rank must build the same model");
  // ...then, those equal, each parameter's number of dims, whether it requires grad (a
  // layer frozen on one rank only would be reduced by the others alone), and its sizes,
  // padded with -1.
  const size_t row = size_t(dims) + 2;
  std::vector<int64_t> shapes(params.size() * row, -1);
  for (size_t i = 0; i < params.size(); ++i) {
    shapes[i * row] = params[i].dim();
    shapes[i * row + 1] = params[i].requires_grad();
    for (int64_t d = 0; d < params[i].dim(); ++d) shapes[i * row + 2 + size_t(d)] = params[i].size(d);
  }
  if (same_on_every_rank(group, shapes, &low, &high)) return;
  const size_t first = size_t(std::mismatch(low.begin(), low.end(), high.begin()).first - low.begin());
  const size_t i = first / row, field = first % row;
  const std::string name = i < names.size() ? names[i] : "#" + std::to_string(i);
  if (field == 1)
    throw Error(who + " the model differs between ranks: parameter \"" + name + "\" " +
                (params[i].requires_grad() ? "requires grad" : "is frozen (requires_grad false)") + " on rank " +
                std::to_string(group.rank()) +
                " but not on another rank; freeze the same layers on every rank before wrapping the model");
  throw Error(
      who + " the model differs between ranks: parameter \"" + name + "\" has shape " + shape_str(params[i].shape()) +
      " on rank " + std::to_string(group.rank()) + " but another shape on another rank (" +
      (field == 0 ? "dims" : "size of dim " + std::to_string(field - 2)) + " from " + std::to_string(low[first]) +
      " to " + std::to_string(high[first]) + "); every rank must build the same model");
}

}  // namespace engine::dist
