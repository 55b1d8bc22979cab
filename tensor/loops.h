// Internal: the strided loop every CPU kernel runs on. Not part of the public API.
//
// for_each_offset(shape, {out_strides, a_strides}, {out_off, a_off}, f) calls f(offsets)
// once per index of `shape` in row-major order, where offsets[k] is that element's position
// in operand k. Broadcast operands simply have stride 0 along the broadcast dims.
#pragma once

#include <array>
#include <cstdint>
#include <vector>

#include "tensor/shape.h"

namespace engine::detail {

// Merges neighbouring dims that every operand walks as one (stride[d] == stride[d+1] *
// size[d+1]), so a contiguous tensor becomes a single long inner loop.
template <size_t N>
void coalesce(Shape& shape, std::array<Strides, N>& strides) {
  if (shape.size() < 2) return;
  Shape s{shape[0]};
  std::array<Strides, N> st;
  for (size_t k = 0; k < N; ++k) st[k] = {strides[k][0]};
  for (size_t d = 1; d < shape.size(); ++d) {
    bool merge = true;
    for (size_t k = 0; k < N; ++k) merge = merge && st[k].back() == strides[k][d] * shape[d];
    if (merge) {
      s.back() *= shape[d];
      for (size_t k = 0; k < N; ++k) st[k].back() = strides[k][d];
    } else {
      s.push_back(shape[d]);
      for (size_t k = 0; k < N; ++k) st[k].push_back(strides[k][d]);
    }
  }
  shape = s;
  strides = st;
}

// Like for_each_offset, but calls f(offsets, n, steps) once per innermost run of n
// elements, where operand k's elements are at offsets[k] + i * steps[k] for i < n. Kernels
// that can vectorise or keep an accumulator in a register take the run whole.
template <size_t N, class F>
void for_each_run(Shape shape, std::array<Strides, N> strides, std::array<int64_t, N> offs, F&& f) {
  if (numel(shape) == 0) return;
  coalesce(shape, strides);
  const int64_t nd = int64_t(shape.size());
  if (nd == 0) {
    std::array<int64_t, N> one;
    one.fill(0);
    f(offs, int64_t(1), one);
    return;
  }
  const int64_t inner = shape[nd - 1];
  std::array<int64_t, N> step;
  for (size_t k = 0; k < N; ++k) step[k] = strides[k][nd - 1];
  std::vector<int64_t> index(nd, 0);
  while (true) {
    f(offs, inner, step);
    // Odometer over the outer dims.
    int64_t d = nd - 2;
    for (; d >= 0; --d) {
      ++index[d];
      for (size_t k = 0; k < N; ++k) offs[k] += strides[k][d];
      if (index[d] < shape[d]) break;
      for (size_t k = 0; k < N; ++k) offs[k] -= strides[k][d] * shape[d];
      index[d] = 0;
    }
    if (d < 0) return;
  }
}

template <size_t N, class F>
void for_each_offset(Shape shape, std::array<Strides, N> strides, std::array<int64_t, N> offs, F&& f) {
  for_each_run<N>(std::move(shape), std::move(strides), offs,
                  [&](std::array<int64_t, N> o, int64_t n, const std::array<int64_t, N>& step) {
                    for (int64_t i = 0; i < n; ++i) {
                      f(o);
                      for (size_t k = 0; k < N; ++k) o[k] += step[k];
                    }
                  });
}

// Strides that read `strides` (of a tensor shaped `shape`) as if broadcast to `out`:
// leading missing dims and size-1 dims get stride 0.
inline Strides broadcast_strides(const Shape& shape, const Strides& strides, const Shape& out) {
  Strides r(out.size(), 0);
  const size_t lead = out.size() - shape.size();
  for (size_t i = 0; i < shape.size(); ++i) r[lead + i] = shape[i] == 1 ? 0 : strides[i];
  return r;
}

}  // namespace engine::detail
