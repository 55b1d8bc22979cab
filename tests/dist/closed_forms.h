// Test helpers: all_reduce inputs whose results have closed forms, and a check of every op.
//
//   Tensor t = closed_forms::input(rank, n);          // x[i] = (rank + 1) * (i % 7 + 1)
//   std::string why = closed_forms::check_every_op(g, n, &sum);   // "" when every op is right
#pragma once

#include <cmath>
#include <sstream>
#include <string>
#include <vector>

#include "dist/process_group.h"
#include "tensor/ops.h"

namespace engine::testing::closed_forms {

// Rank r's input: x[i] = (r + 1) * (i % 7 + 1). Small integers, so float sums are exact.
inline Tensor input(int rank, int64_t n, DType dtype = DType::Float32) {
  std::vector<float> v(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) v[size_t(i)] = float((rank + 1) * (i % 7 + 1));
  return from_vector(v, {n}).to(dtype);
}

// Element i of op over `world` ranks' inputs.
inline double closed_form(dist::ReduceOp op, int world, int64_t i) {
  const double base = double(i % 7 + 1);
  switch (op) {
    case dist::ReduceOp::Sum: return base * world * (world + 1) / 2;
    case dist::ReduceOp::Avg: return base * (world + 1) / 2.0;
    case dist::ReduceOp::Min: return base;
    case dist::ReduceOp::Max: return base * world;
    case dist::ReduceOp::Product: {
      double p = 1;
      for (int r = 1; r <= world; ++r) p *= base * r;
      return p;
    }
  }
  return 0;
}

// All-reduces `n` elements with every op (Product only up to 1023, where it stays in
// float's range) and compares each with its closed form; *sum gets the Sum result (for a
// bit-for-bit comparison across ranks). Returns "" or the first difference, in words.
// bfloat16/float16: sums and extremes stay exact (small integers); Avg and Product round,
// up to one 16-bit step per rank's hop.
inline std::string check_every_op(dist::ProcessGroup& g, int64_t n, std::vector<float>* sum,
                                  DType dtype = DType::Float32) {
  using dist::ReduceOp;
  const double tolerance = is_half(dtype) ? 0x1p-7 * g.size() : 1e-6;
  for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Avg, ReduceOp::Min, ReduceOp::Max, ReduceOp::Product}) {
    if (op == ReduceOp::Product && n > 1023) continue;
    Tensor t = input(g.rank(), n, dtype);
    g.all_reduce(t, op).wait();
    if (t.dtype() != dtype) return std::string("the result's dtype changed to ") + dtype_name(t.dtype());
    const std::vector<float> v = t.to(DType::Float32).to_vector<float>();
    for (int64_t i = 0; i < n; ++i) {
      const double want = closed_form(op, g.size(), i);
      if (!(std::abs(v[size_t(i)] - want) <= tolerance * std::abs(want))) {
        std::ostringstream why;
        why << "world " << g.size() << " n " << n << " op " << dist::reduce_op_name(op) << " element " << i << ": got "
            << v[size_t(i)] << " want " << want;
        return why.str();
      }
    }
    if (op == ReduceOp::Sum) *sum = v;
  }
  return "";
}

}  // namespace engine::testing::closed_forms
