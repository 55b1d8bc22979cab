#include "data/dataset.h"

#include <cstring>

namespace engine::data {

Tensor stack(const std::vector<Tensor>& tensors) {
  ENGINE_REQUIRE(!tensors.empty(), "[stack] needs at least one tensor");
  const Shape& s = tensors[0].shape();
  Shape out_shape{int64_t(tensors.size())};
  out_shape.insert(out_shape.end(), s.begin(), s.end());
  Tensor out = empty(out_shape, tensors[0].dtype());
  for (size_t i = 0; i < tensors.size(); ++i) {
    ENGINE_REQUIRE(tensors[i].shape() == s && tensors[i].dtype() == tensors[0].dtype(), "[stack] tensor ", i,
                   " has shape ", shape_str(tensors[i].shape()), " ", dtype_name(tensors[i].dtype()), ", expected ",
                   shape_str(s), " ", dtype_name(tensors[0].dtype()));
    out.select(0, int64_t(i)).copy_(tensors[i]);
  }
  return out;
}

Example Dataset::get_batch(const std::vector<int64_t>& indices) const {
  std::vector<Tensor> inputs, targets;
  for (int64_t i : indices) {
    Example e = get(i);
    inputs.push_back(e.input);
    targets.push_back(e.target);
  }
  return {stack(inputs), stack(targets)};
}

TensorDataset::TensorDataset(Tensor inputs, Tensor targets) : inputs_(std::move(inputs)), targets_(std::move(targets)) {
  ENGINE_REQUIRE(inputs_.dim() >= 1 && targets_.dim() >= 1, "[TensorDataset] inputs and targets need a dim 0");
  ENGINE_REQUIRE(inputs_.size(0) == targets_.size(0), "[TensorDataset] inputs have ", inputs_.size(0),
                 " examples but targets have ", targets_.size(0));
}

namespace {
void check_index(int64_t i, int64_t n) {
  ENGINE_REQUIRE(i >= 0 && i < n, "[Dataset] index ", i, " is out of range for a dataset of ", n, " examples");
}
}  // namespace

Example TensorDataset::get(int64_t i) const {
  check_index(i, size());
  return {inputs_.select(0, i), targets_.select(0, i)};
}

Tensor gather_rows(const Tensor& t, const std::vector<int64_t>& indices) {
  const Tensor src = t.contiguous();
  Shape shape = src.shape();
  shape[0] = int64_t(indices.size());
  Tensor out = empty(shape, src.dtype());
  const size_t row_bytes = size_t(src.numel() / std::max<int64_t>(src.size(0), 1)) * dtype_size(src.dtype());
  const char* from = src.bytes();
  char* to = static_cast<char*>(out.storage()->data());
  for (size_t k = 0; k < indices.size(); ++k) {
    check_index(indices[k], src.size(0));
    std::memcpy(to + k * row_bytes, from + size_t(indices[k]) * row_bytes, row_bytes);
  }
  return out;
}

Example TensorDataset::get_batch(const std::vector<int64_t>& indices) const {
  return {gather_rows(inputs_, indices), gather_rows(targets_, indices)};
}

}  // namespace engine::data
