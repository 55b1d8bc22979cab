#include "nn/functional.h"

#include <functional>

#include "nn/autocast.h"
#include "tensor/nn_ops.h"
#include "tensor/ops.h"

namespace engine::nn {

using Grads = std::vector<Tensor>;
using Needs = autograd::Needs;

namespace {
// Under autocast (autocast.h) a product runs in 16 bits: its input through a recorded cast
// (whose backward converts the gradient back), its parameters as plain 16-bit copies
// (the layer's backward writes their gradients in float32 itself).
Variable product_input(const Variable& x) { return autocast_enabled() ? autograd::to(x, autocast_dtype()) : x; }
Tensor product_copy(const Tensor& t) { return autocast_enabled() ? t.to(autocast_dtype()) : t; }
}  // namespace

namespace {
// a @ b plus bias (broadcast over the product), as PyTorch's addmm: with 16-bit operands
// the bias is added to the GEMM's float32 sums and the result rounded once (rounding the
// product, then its sum with the bias, would round twice: a quarter of outputs one ulp off).
Tensor matmul_add(const Tensor& a, const Tensor& b, const Tensor& bias) {
  if (!bias.defined()) return matmul(a, b);
  if (!is_half(a.dtype())) {
    Tensor y = matmul(a, b);
    return add_(y, bias);
  }
  Tensor sums = matmul(a, b, empty({a.size(0), b.size(1)}, DType::Float32, a.device()));
  return add_(sums, bias.to(DType::Float32)).to(a.dtype());
}
}  // namespace

Variable linear(const Variable& x_in, const Variable& weight, const Variable& bias) {
  // Under autocast the product runs in 16 bits: the input is cast (a recorded op), the
  // weight and bias are copied to 16 bits here, and backward writes the weight's gradient
  // in float32 straight from the GEMM's float32 sums (PyTorch rounds it to 16 bits, then
  // widens it back: two conversions of every weight, for a less exact gradient).
  const Variable x = product_input(x_in);
  const Shape xs = x.shape();
  const int64_t in = weight.size(1), out = weight.size(0);
  ENGINE_REQUIRE(weight.dim() == 2, "[linear] weight must be (out, in), got ", shape_str(weight.shape()));
  ENGINE_REQUIRE(x.dim() >= 1 && x.size(-1) == in, "[linear] expects input with last dim ", in, ", got shape ",
                 shape_str(xs));
  ENGINE_REQUIRE(!bias.defined() || bias.shape() == Shape{out}, "[linear] bias must be (", out, ",), got ",
                 shape_str(bias.shape()));
  const DType wdtype = weight.data().dtype(), bdtype = bias.defined() ? bias.data().dtype() : wdtype;
  const Tensor x2 = x.data().reshape({-1, in});  // (M, in): batch dims flattened
  const Tensor w = product_copy(weight.data());  // the product's copy
  // (M, out); W^T read in place
  const Tensor y = matmul_add(x2, w.transpose(0, 1), bias.defined() ? product_copy(bias.data()) : Tensor());
  Shape ys = xs;
  ys.back() = out;
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return autograd::record("linear", y.reshape(ys), inputs,
                          [x2, w, xs, in, out, wdtype, bdtype](const Tensor& g, const Needs& n) {
                            const Tensor g2 = g.reshape({-1, out});  // (M, out)
                            Grads grads(n.size());
                            if (n[0]) grads[0] = matmul(g2, w).reshape(xs);  // dx = g W        (M, in)
                            if (n[1]) {  // dW = g^T x (out, in), into DDP's bucket when offered
                              Tensor into = n.into[1];
                              if (!into.defined() && wdtype != g2.dtype()) into = empty({out, in}, wdtype, g2.device());
                              grads[1] = matmul(g2.transpose(0, 1), x2, into);
                            }
                            if (n.size() > 2 && n[2]) grads[2] = sum(g2, {0}).to(bdtype);  // db = sum_m g  (out,)
                            return grads;
                          });
}

namespace {
// float32 tensors on the CPU: one image at a time (conv2d.cc); under autocast with 16-bit
// products (conv2d_16bit.cc), x left float32 (it is rounded inside) and every gradient
// float32.
Variable conv2d_per_image(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride,
                          int64_t padding) {
  const bool half = autocast_enabled();
  const DType dtype = autocast_dtype();
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  const Tensor xd = x.data(), wd = weight.data(), bd = bias.defined() ? bias.data() : Tensor();
  Tensor out =
      half ? conv2d_16bit_forward(xd, wd, bd, stride, padding, dtype) : conv2d_forward(xd, wd, bd, stride, padding);
  return autograd::record("conv2d", std::move(out), inputs, [=](const Tensor& g, const Needs& n) {
    const bool dbias = n.size() > 2 && n[2];
    Conv2dGrads d = half ? conv2d_16bit_backward(g, xd, wd, stride, padding, dtype, n[0], n[1], dbias)
                         : conv2d_backward(g, xd, wd, stride, padding, n[0], n[1], dbias);
    Grads grads{d.dx, d.dw};
    if (n.size() > 2) grads.push_back(d.dbias);
    return grads;
  });
}
}  // namespace

namespace {
// conv2d and max_pool2d take a batch (N, C, H, W) or, as in PyTorch, one unbatched image
// (C, H, W): `batched` then runs on it as a batch of one and the batch dim is dropped
// again. Both are views recorded in the graph, so the gradient comes back as (C, H, W).
bool unbatched(const char* op, const Variable& x) {
  ENGINE_REQUIRE(x.dim() == 3 || x.dim() == 4, "[", op,
                 "] expects input (N, C, H, W) or an unbatched (C, H, W), got shape ", shape_str(x.shape()));
  return x.dim() == 3;
}
Variable as_batch_of_one(const Variable& x, const std::function<Variable(const Variable&)>& batched) {
  return autograd::squeeze(batched(autograd::unsqueeze(x, 0)), 0);
}
}  // namespace

Variable conv2d(const Variable& x_in, const Variable& weight, const Variable& bias, int64_t stride, int64_t padding) {
  if (unbatched("conv2d", x_in))
    return as_batch_of_one(x_in, [&](const Variable& x) { return conv2d(x, weight, bias, stride, padding); });
  const Shape xs = x_in.shape(), ws = weight.shape();
  ENGINE_REQUIRE(ws.size() == 4, "[conv2d] weight must be (O, C, kh, kw), got ", shape_str(ws));
  check_window("conv2d", xs, ws[2], ws[3], stride, padding);
  ENGINE_REQUIRE(xs[1] == ws[1], "[conv2d] input has ", xs[1], " channels but the weight expects ", ws[1], " (input ",
                 shape_str(xs), ", weight ", shape_str(ws), ")");
  ENGINE_REQUIRE(x_in.data().device() == weight.data().device(), "[conv2d] input on ", x_in.data().device().str(),
                 " but weight on ", weight.data().device().str());
  const Tensor bd = bias.defined() ? bias.data() : Tensor();
  if (conv2d_per_image_applies(x_in.data(), weight.data(), bd))
    return conv2d_per_image(x_in, weight, bias, stride, padding);
  // Otherwise (a GPU, or 16-bit input) the whole batch in one product. Under autocast, as
  // linear: a 16-bit product, and the weight's gradient in float32 from the GEMM's float32
  // sums.
  const Variable x = product_input(x_in);
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  // cols (C*kh*kw, N*OH*OW) holds every image's windows side by side, so out = W (O,
  // C*kh*kw) @ cols is one (O, N*OH*OW) GEMM, then one permuted copy to (N, O, OH, OW).
  // A float32 forward on a GPU forms the same product without writing cols (an implicit
  // GEMM); the backward then builds cols for dW only.
  const int64_t N = xs[0], O = ws[0], kh = ws[2], kw = ws[3];
  const int64_t OH = window_out_size(xs[2], kh, stride, padding), OW = window_out_size(xs[3], kw, stride, padding);
  const int64_t L = N * OH * OW;
  constexpr ColumnLayout kLayout = ColumnLayout::BatchInColumns;
  const DType wdtype = weight.data().dtype(), bdtype = bias.defined() ? bias.data().dtype() : wdtype;
  const Tensor w2 = product_copy(weight.data()).reshape({O, -1});
  Tensor out, cols;
  if (conv2d_gpu_applies(x.data(), weight.data(), bd)) {
    out = conv2d_forward_gpu(x.data(), weight.data(), bd, stride, padding);
  } else {
    cols = im2col(x.data(), kh, kw, stride, padding, kLayout);
    const Tensor out2 = matmul_add(w2, cols, bias.defined() ? product_copy(bias.data()).reshape({O, 1}) : Tensor());
    out = out2.reshape({O, N, OH, OW}).permute({1, 0, 2, 3}).contiguous();
  }
  const Tensor xd = x.data();
  return autograd::record("conv2d", out, inputs, [=](const Tensor& g, const Needs& n) {
    const Tensor g2 = g.permute({1, 0, 2, 3}).contiguous().reshape({O, L});  // (O, N*OH*OW)
    Grads grads(n.size());
    // d cols = W^T @ g, then col2im puts each entry back where im2col took it from.
    if (n[0]) grads[0] = col2im(matmul(w2.transpose(0, 1), g2), xs, kh, kw, stride, padding, kLayout);
    // dW = g @ cols^T: one product whose inner dimension runs over every image and position.
    if (n[1]) {
      const Tensor c = cols.defined() ? cols : im2col(xd, kh, kw, stride, padding, kLayout);
      const int64_t R = w2.size(1);
      if (g2.device().is_cuda() && g2.dtype() == DType::Float32 && N > 1 && O * R <= 4096) {
        // A small dW (a first layer's 32 x 9) over an inner dimension of every position of
        // every image (200,704 at batch 256) gives cuBLAS one tile to work on: one product
        // per image, side by side, then their sum (0.071 -> 0.026-0.029 ms on an H200).
        const int64_t P = OH * OW;
        grads[1] = sum(matmul(g2.reshape({O, N, P}).permute({1, 0, 2}), c.reshape({R, N, P}).permute({1, 2, 0})), {0})
                       .reshape(ws);
      } else {
        const Tensor into = wdtype != g2.dtype() ? empty({O, R}, wdtype, g2.device()) : Tensor();
        grads[1] = matmul(g2, c.transpose(0, 1), into).reshape(ws);
      }
    }
    if (n.size() > 2 && n[2]) grads[2] = sum(g2, {1}).to(bdtype);
    return grads;
  });
}

Variable max_pool2d(const Variable& x, int64_t kernel, int64_t stride, int64_t padding) {
  if (unbatched("max_pool2d", x))
    return as_batch_of_one(x, [&](const Variable& b) { return max_pool2d(b, kernel, stride, padding); });
  const Shape xs = x.shape();
  const MaxPool pool = max_pool2d_forward(x.data(), kernel, stride, padding);
  const Tensor where = pool.where;
  return autograd::record("max_pool2d", pool.out, {x}, [xs, where](const Tensor& g, const Needs&) {
    return Grads{max_pool2d_backward(g, where, xs)};  // each output's gradient to its maximum
  });
}

Variable dropout(const Variable& x, double p, bool training, Generator* gen) {
  ENGINE_REQUIRE(p >= 0 && p <= 1, "[dropout] probability must be in [0, 1], got ", p);
  if (!training || p == 0) return x;
  // Every element dropped: x * 0, as PyTorch (1 / (1 - p) would make the mask inf * 0 = NaN).
  if (p == 1) return autograd::mul(x, Variable(zeros({}, x.data().dtype(), x.data().device())));
  // mask = 1/(1-p) where kept, 0 where dropped, so the expected value is unchanged.
  const Tensor mask = ge(rand(x.shape(), gen, x.data().device()), scalar_tensor(p)) * (1.0 / (1.0 - p));
  return autograd::mul(x, Variable(mask));
}

}  // namespace engine::nn
