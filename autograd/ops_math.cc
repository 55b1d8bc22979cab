// Differentiable elementwise ops and matmul. Each op: forward with the tensor op, then its
// local derivative right under it (the chain rule's one step: grad_in = grad_out * d out/d in).
// Broadcasting ops sum their input gradients back to the input's shape with sum_to.
#include "autograd/ops.h"
#include "tensor/ops.h"

namespace engine::autograd {

using Grads = std::vector<Tensor>;

namespace {
// Two different floating dtypes (bfloat16 or float16 with float32, or with each other) meet
// in float32, as PyTorch promotes them: each goes through a recorded to(), whose backward
// hands the gradient back in its own dtype, so the op itself sees one dtype.
bool mixed(const Variable& a, const Variable& b) {
  const DType da = a.data().dtype(), db = b.data().dtype();
  return da != db && is_floating(da) && is_floating(db);
}
}  // namespace

Variable add(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return add(to(a, DType::Float32), to(b, DType::Float32));
  const Shape sa = a.shape(), sb = b.shape();
  return record("add", engine::add(a.data(), b.data()), {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
    // d(a+b)/da = 1, d(a+b)/db = 1
    return Grads{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(g, sb) : Tensor()};
  });
}

Variable sub(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return sub(to(a, DType::Float32), to(b, DType::Float32));
  const Shape sa = a.shape(), sb = b.shape();
  return record("sub", engine::sub(a.data(), b.data()), {a, b}, [sa, sb](const Tensor& g, const Needs& n) {
    return Grads{n[0] ? sum_to(g, sa) : Tensor(), n[1] ? sum_to(engine::neg(g), sb) : Tensor()};
  });
}

Variable mul(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return mul(to(a, DType::Float32), to(b, DType::Float32));
  const Tensor x = a.data(), y = b.data();
  return record("mul", engine::mul(x, y), {a, b}, [x, y](const Tensor& g, const Needs& n) {
    // d(xy)/dx = y, d(xy)/dy = x
    return Grads{n[0] ? sum_to(g * y, x.shape()) : Tensor(), n[1] ? sum_to(g * x, y.shape()) : Tensor()};
  });
}

Variable div(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return div(to(a, DType::Float32), to(b, DType::Float32));
  const Tensor x = a.data(), y = b.data();
  return record("div", engine::div(x, y), {a, b}, [x, y](const Tensor& g, const Needs& n) {
    // d(x/y)/dx = 1/y, d(x/y)/dy = -x/y^2
    return Grads{n[0] ? sum_to(g / y, x.shape()) : Tensor(),
                 n[1] ? sum_to(engine::neg(g * x / (y * y)), y.shape()) : Tensor()};
  });
}

Variable pow(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return pow(to(a, DType::Float32), to(b, DType::Float32));
  const Tensor x = a.data(), y = b.data(), out = engine::pow(x, y);
  return record("pow", out, {a, b}, [x, y, out](const Tensor& g, const Needs& n) {
    // d(x^y)/dx = y x^(y-1), d(x^y)/dy = x^y ln x. At the singular points PyTorch takes the
    // limits that keep training finite, and so do we: the x-gradient is 0 where y = 0 (not
    // 0 * 0^-1 = NaN), the y-gradient is 0 where x = 0 and y >= 0 (not 0 * ln 0 = NaN).
    const Tensor zero = zeros({}, x.dtype(), x.device());
    Grads grads(2);
    if (n[0]) grads[0] = sum_to(engine::where(engine::eq(y, zero), zero, g * y * engine::pow(x, y - 1.0)), x.shape());
    if (n[1]) {
      const Tensor masked = engine::eq(x, zero) * engine::ge(y, zero);
      grads[1] = sum_to(engine::where(masked, zero, g * out * engine::log(x)), y.shape());
    }
    return grads;
  });
}

Variable pow(const Variable& a, double e) {
  const Tensor x = a.data();
  return record("pow", engine::pow(x, e), {a}, [x, e](const Tensor& g, const Needs&) {
    // d(x^e)/dx = e x^(e-1); for e = 0 it is 0 everywhere (x^-1 at x = 0 would make it NaN).
    if (e == 0) return Grads{engine::zeros_like(g)};
    return Grads{g * engine::pow(x, e - 1) * e};
  });
}

Variable maximum(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return maximum(to(a, DType::Float32), to(b, DType::Float32));
  const Tensor x = a.data(), y = b.data();
  return record("maximum", engine::maximum(x, y), {a, b}, [x, y](const Tensor& g, const Needs& n) {
    // The gradient goes to the larger input; on ties it is split evenly, as in PyTorch.
    const Tensor to_x = engine::gt(x, y) + engine::eq(x, y) * 0.5, to_y = 1.0 - to_x;
    return Grads{n[0] ? sum_to(g * to_x, x.shape()) : Tensor(), n[1] ? sum_to(g * to_y, y.shape()) : Tensor()};
  });
}

Variable minimum(const Variable& a, const Variable& b) {
  if (mixed(a, b)) return minimum(to(a, DType::Float32), to(b, DType::Float32));
  const Tensor x = a.data(), y = b.data();
  return record("minimum", engine::minimum(x, y), {a, b}, [x, y](const Tensor& g, const Needs& n) {
    const Tensor to_x = engine::lt(x, y) + engine::eq(x, y) * 0.5, to_y = 1.0 - to_x;
    return Grads{n[0] ? sum_to(g * to_x, x.shape()) : Tensor(), n[1] ? sum_to(g * to_y, y.shape()) : Tensor()};
  });
}

Variable where(const Tensor& cond, const Variable& a, const Variable& b) {
  if (mixed(a, b)) return where(cond, to(a, DType::Float32), to(b, DType::Float32));
  const Shape sa = a.shape(), sb = b.shape();
  return record("where", engine::where(cond, a.data(), b.data()), {a, b},
                [cond, sa, sb](const Tensor& g, const Needs& n) {
                  // The gradient flows to whichever input was picked.
                  const Tensor zero = zeros({});
                  return Grads{n[0] ? sum_to(engine::where(cond, g, zero), sa) : Tensor(),
                               n[1] ? sum_to(engine::where(cond, zero, g), sb) : Tensor()};
                });
}

Variable neg(const Variable& a) {
  return record("neg", engine::neg(a.data()), {a}, [](const Tensor& g, const Needs&) { return Grads{engine::neg(g)}; });
}

Variable abs(const Variable& a) {
  const Tensor x = a.data();
  return record("abs", engine::abs(x), {a}, [x](const Tensor& g, const Needs&) {
    // d|x|/dx = sign(x), taken as 0 at x = 0
    const Tensor zero = zeros({});
    return Grads{g * (engine::gt(x, zero) - engine::lt(x, zero))};
  });
}

Variable exp(const Variable& a) {
  const Tensor out = engine::exp(a.data());
  return record("exp", out, {a}, [out](const Tensor& g, const Needs&) { return Grads{g * out}; });  // (e^x)' = e^x
}

Variable log(const Variable& a) {
  const Tensor x = a.data();
  return record("log", engine::log(x), {a}, [x](const Tensor& g, const Needs&) { return Grads{g / x}; });  // 1/x
}

Variable sqrt(const Variable& a) {
  const Tensor out = engine::sqrt(a.data());
  return record("sqrt", out, {a}, [out](const Tensor& g, const Needs&) { return Grads{g / (out * 2.0)}; });
}

Variable tanh(const Variable& a) {
  const Tensor out = engine::tanh(a.data());
  return record("tanh", out, {a}, [out](const Tensor& g, const Needs&) {
    return Grads{g * (1.0 - out * out)};  // tanh' = 1 - tanh^2
  });
}

Variable sigmoid(const Variable& a) {
  const Tensor out = engine::sigmoid(a.data());
  return record("sigmoid", out, {a}, [out](const Tensor& g, const Needs&) {
    return Grads{g * out * (1.0 - out)};  // s' = s (1 - s)
  });
}

Variable relu(const Variable& a) {
  const Tensor x = a.data();
  return record("relu", engine::relu(x), {a}, [x](const Tensor& g, const Needs&) {
    return Grads{engine::relu_backward(g, x)};  // g where x > 0, else 0
  });
}

Variable clamp(const Variable& a, double lo, double hi) {
  const Tensor x = a.data();
  return record("clamp", engine::clamp(x, lo, hi), {a}, [x, lo, hi](const Tensor& g, const Needs&) {
    // Passes the gradient where x was inside [lo, hi], blocks it where x was clipped.
    return Grads{g * engine::ge(x, scalar_tensor(lo)) * engine::le(x, scalar_tensor(hi))};
  });
}

Variable matmul(const Variable& a, const Variable& b) {
  const Tensor x = a.data(), y = b.data();
  return record("matmul", engine::matmul(x, y), {a, b}, [x, y](const Tensor& g, const Needs& n) {
    // out = x @ y  =>  dx = g @ y^T,  dy = x^T @ g; batch dims that were broadcast are summed.
    // The transposes are views: the GEMM reads them in place. A vector was multiplied as a
    // (1,K) row or a (K,1) column (tensor/ops.h): the formulas run on those matrices, with
    // the dims the forward dropped put back into g, and each gradient takes its input's shape.
    const Tensor xm = x.dim() == 1 ? x.unsqueeze(0) : x, ym = y.dim() == 1 ? y.unsqueeze(1) : y;
    Tensor gm = g;
    if (x.dim() == 1) gm = gm.unsqueeze(gm.dim() - (y.dim() == 1 ? 0 : 1));
    if (y.dim() == 1) gm = gm.unsqueeze(gm.dim());
    return Grads{n[0] ? sum_to(engine::matmul(gm, ym.transpose(-1, -2)), xm.shape()).reshape(x.shape()) : Tensor(),
                 n[1] ? sum_to(engine::matmul(xm.transpose(-1, -2), gm), ym.shape()).reshape(y.shape()) : Tensor()};
  });
}

// ---- operators and constants

Variable operator+(const Variable& a, const Variable& b) { return add(a, b); }
Variable operator-(const Variable& a, const Variable& b) { return sub(a, b); }
Variable operator*(const Variable& a, const Variable& b) { return mul(a, b); }
Variable operator/(const Variable& a, const Variable& b) { return div(a, b); }
Variable operator-(const Variable& a) { return neg(a); }
Variable operator+(const Variable& a, double s) { return add(a, Variable(scalar_tensor(s))); }
Variable operator-(const Variable& a, double s) { return sub(a, Variable(scalar_tensor(s))); }
Variable operator*(const Variable& a, double s) { return mul(a, Variable(scalar_tensor(s))); }
Variable operator/(const Variable& a, double s) { return div(a, Variable(scalar_tensor(s))); }
Variable operator+(double s, const Variable& a) { return add(Variable(scalar_tensor(s)), a); }
Variable operator-(double s, const Variable& a) { return sub(Variable(scalar_tensor(s)), a); }
Variable operator*(double s, const Variable& a) { return mul(Variable(scalar_tensor(s)), a); }
Variable operator/(double s, const Variable& a) { return div(Variable(scalar_tensor(s)), a); }

Variable eq(const Variable& a, const Variable& b) { return Variable(engine::eq(a.data(), b.data())); }
Variable ne(const Variable& a, const Variable& b) { return Variable(engine::ne(a.data(), b.data())); }
Variable lt(const Variable& a, const Variable& b) { return Variable(engine::lt(a.data(), b.data())); }
Variable le(const Variable& a, const Variable& b) { return Variable(engine::le(a.data(), b.data())); }
Variable gt(const Variable& a, const Variable& b) { return Variable(engine::gt(a.data(), b.data())); }
Variable ge(const Variable& a, const Variable& b) { return Variable(engine::ge(a.data(), b.data())); }
Variable argmax(const Variable& a, int64_t dim, bool keepdim) {
  return Variable(engine::argmax(a.data(), dim, keepdim));
}

}  // namespace engine::autograd
