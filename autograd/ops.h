// Differentiable ops on Variables: the same names and contracts as tensor/ops.h, each also
// recording its backward formula (see ops_math.cc and ops_shape.cc, formula under op).
//
//   Variable w(randn({3, 1}), true), b(zeros({1}), true);
//   Variable y = matmul(x, w) + b;                  // x: (N,3) -> y: (N,1)
//   Variable loss = mean(pow(y - target, 2.0));
//   loss.backward();                                // w.grad(), b.grad() now hold dloss/dw, dloss/db
//
// Comparisons and argmax are not differentiable: they return constants.
#pragma once

#include <vector>

#include "autograd/variable.h"

namespace engine::autograd {

// ---- elementwise, broadcasting like tensor/ops.h
Variable add(const Variable& a, const Variable& b);
Variable sub(const Variable& a, const Variable& b);
Variable mul(const Variable& a, const Variable& b);
Variable div(const Variable& a, const Variable& b);
Variable pow(const Variable& a, const Variable& b);
Variable pow(const Variable& a, double exponent);
Variable maximum(const Variable& a, const Variable& b);
Variable minimum(const Variable& a, const Variable& b);
Variable where(const Tensor& cond, const Variable& a, const Variable& b);
Variable neg(const Variable& a);
Variable abs(const Variable& a);
Variable exp(const Variable& a);
Variable log(const Variable& a);
Variable sqrt(const Variable& a);
Variable tanh(const Variable& a);
Variable sigmoid(const Variable& a);
Variable relu(const Variable& a);
Variable clamp(const Variable& a, double lo, double hi);

Variable operator+(const Variable& a, const Variable& b);
Variable operator-(const Variable& a, const Variable& b);
Variable operator*(const Variable& a, const Variable& b);
Variable operator/(const Variable& a, const Variable& b);
Variable operator-(const Variable& a);
Variable operator+(const Variable& a, double s);
Variable operator-(const Variable& a, double s);
Variable operator*(const Variable& a, double s);
Variable operator/(const Variable& a, double s);
Variable operator+(double s, const Variable& a);
Variable operator-(double s, const Variable& a);
Variable operator*(double s, const Variable& a);
Variable operator/(double s, const Variable& a);

// ---- not differentiable: constants (float32 masks / int64 indices)
Variable eq(const Variable& a, const Variable& b);
Variable ne(const Variable& a, const Variable& b);
Variable lt(const Variable& a, const Variable& b);
Variable le(const Variable& a, const Variable& b);
Variable gt(const Variable& a, const Variable& b);
Variable ge(const Variable& a, const Variable& b);
Variable argmax(const Variable& a, int64_t dim, bool keepdim = false);

// ---- reductions
Variable sum(const Variable& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable mean(const Variable& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable max(const Variable& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable min(const Variable& a, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Variable var(const Variable& a, const std::vector<int64_t>& dims = {}, bool keepdim = false, int64_t correction = 1);

// ---- matrix product (batched, broadcasting batch dims)
Variable matmul(const Variable& a, const Variable& b);

// ---- views and copies
Variable reshape(const Variable& a, const Shape& shape);
Variable transpose(const Variable& a, int64_t d0, int64_t d1);
Variable permute(const Variable& a, const std::vector<int64_t>& dims);
Variable narrow(const Variable& a, int64_t dim, int64_t start, int64_t length);
Variable slice(const Variable& a, int64_t dim, int64_t start, int64_t end, int64_t step = 1);
Variable select(const Variable& a, int64_t dim, int64_t index);
Variable expand(const Variable& a, const Shape& shape);
Variable squeeze(const Variable& a, int64_t dim);
Variable unsqueeze(const Variable& a, int64_t dim);
// A copy in another dtype; its gradient is converted back (mixed precision: nn/autocast.h).
Variable to(const Variable& a, DType dtype);
Variable contiguous(const Variable& a);

}  // namespace engine::autograd
