#include "nn/functional.h"

#include <algorithm>
#include <limits>

#include "tensor/cuda/kernels.h"
#include "tensor/ops.h"

namespace engine::nn {

using Grads = std::vector<Tensor>;
using Needs = autograd::Needs;

namespace {
int64_t out_size(int64_t in, int64_t k, int64_t stride, int64_t padding) { return (in + 2 * padding - k) / stride + 1; }

void check_window(const char* op, const Shape& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  ENGINE_REQUIRE(x.size() == 4, "[", op, "] expects input (N, C, H, W), got shape ", shape_str(x));
  ENGINE_REQUIRE(stride > 0 && padding >= 0 && kh > 0 && kw > 0, "[", op, "] needs kernel > 0, stride > 0, padding >= 0");
  ENGINE_REQUIRE(x[2] + 2 * padding >= kh && x[3] + 2 * padding >= kw, "[", op, "] kernel ", kh, "x", kw,
                 " is larger than the padded input ", x[2] + 2 * padding, "x", x[3] + 2 * padding);
}

// Walks every (n, c, i, j, oy, ox) of the im2col layout, calling f(col_index, image_index)
// for entries inside the image. im2col copies image -> col; col2im adds col -> image.
template <class F>
void for_each_window_entry(const Shape& xs, int64_t kh, int64_t kw, int64_t s, int64_t p, F f) {
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t OH = out_size(H, kh, s, p), OW = out_size(W, kw, s, p);
  int64_t col = 0;
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t i = 0; i < kh; ++i)
        for (int64_t j = 0; j < kw; ++j)
          for (int64_t oy = 0; oy < OH; ++oy) {
            const int64_t y = oy * s + i - p;
            const int64_t base = ((n * C + c) * H + y) * W;
            for (int64_t ox = 0; ox < OW; ++ox, ++col) {
              const int64_t x = ox * s + j - p;
              if (y >= 0 && y < H && x >= 0 && x < W) f(col, base + x);
            }
          }
}
}  // namespace

Variable linear(const Variable& x, const Variable& weight, const Variable& bias) {
  const Shape xs = x.shape();
  const int64_t in = weight.size(1), out = weight.size(0);
  ENGINE_REQUIRE(weight.dim() == 2, "[linear] weight must be (out, in), got ", shape_str(weight.shape()));
  ENGINE_REQUIRE(x.dim() >= 1 && x.size(-1) == in, "[linear] expects input with last dim ", in, ", got shape ",
                 shape_str(xs));
  ENGINE_REQUIRE(!bias.defined() || bias.shape() == Shape{out}, "[linear] bias must be (", out, ",), got ",
                 shape_str(bias.shape()));
  const Tensor x2 = x.data().reshape({-1, in}), w = weight.data();  // (M, in): batch dims flattened
  Tensor y = matmul(x2, w.transpose(0, 1));                          // (M, out); W^T read in place
  if (bias.defined()) add_(y, bias.data());
  Shape ys = xs;
  ys.back() = out;
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return autograd::record("linear", y.reshape(ys), inputs, [x2, w, xs, in, out](const Tensor& g, const Needs& n) {
    const Tensor g2 = g.reshape({-1, out});  // (M, out)
    Grads grads(n.size());
    if (n[0]) grads[0] = matmul(g2, w).reshape(xs);          // dx = g W        (M, in)
    if (n[1]) grads[1] = matmul(g2.transpose(0, 1), x2, n.into[1]);  // dW = g^T x (out, in), into
                                                                      // DDP's bucket when offered
    if (n.size() > 2 && n[2]) grads[2] = sum(g2, {0});        // db = sum_m g    (out,)
    return grads;
  });
}

Tensor im2col(const Tensor& x, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  check_window("im2col", x.shape(), kh, kw, stride, padding);
  const Tensor xc = x.contiguous();
  const Shape& s = xc.shape();
  const int64_t OH = out_size(s[2], kh, stride, padding), OW = out_size(s[3], kw, stride, padding);
  if (xc.device().is_cuda()) {  // every entry written by the kernel, padding as 0
    Tensor cols = empty({s[0], s[1] * kh * kw, OH * OW}, DType::Float32, xc.device());
    cuda::im2col(xc.device().index, s[0], s[1], s[2], s[3], kh, kw, stride, padding, xc.data<float>(),
                 cols.data<float>());
    return cols;
  }
  Tensor cols = zeros({s[0], s[1] * kh * kw, OH * OW});
  float* out = cols.data<float>();
  const float* in = xc.data<float>();
  for_each_window_entry(s, kh, kw, stride, padding, [&](int64_t col, int64_t img) { out[col] = in[img]; });
  return cols;
}

Tensor col2im(const Tensor& cols, const Shape& xs, int64_t kh, int64_t kw, int64_t stride, int64_t padding) {
  check_window("col2im", xs, kh, kw, stride, padding);
  const Tensor cc = cols.contiguous();
  if (cc.device().is_cuda()) {  // one thread per pixel gathers its entries: every pixel written
    Tensor x = empty(xs, DType::Float32, cc.device());
    cuda::col2im(cc.device().index, xs[0], xs[1], xs[2], xs[3], kh, kw, stride, padding, cc.data<float>(),
                 x.data<float>());
    return x;
  }
  Tensor x = zeros(xs);
  float* out = x.data<float>();
  const float* in = cc.data<float>();
  for_each_window_entry(xs, kh, kw, stride, padding, [&](int64_t col, int64_t img) { out[img] += in[col]; });
  return x;
}

namespace {
// conv2d on a GPU: the same maths as below, but the whole batch in one GEMM per product.
// im2col lays the columns out as (C*kh*kw, N*OH*OW), so out = W @ cols is one (O, N*OH*OW)
// product (then one permuted copy to (N, O, OH, OW)), and dW = g @ cols^T is one product
// with N*OH*OW as its inner dimension, instead of N small products and a sum over them.
Variable conv2d_cuda(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride, int64_t padding,
                     int64_t OH, int64_t OW) {
  const Shape xs = x.shape(), ws = weight.shape();
  const int64_t N = xs[0], O = ws[0], L = N * OH * OW;
  const Device dev = x.data().device();
  ENGINE_REQUIRE(weight.data().device() == dev, "[conv2d] input on ", dev.str(), " but weight on ",
                 weight.data().device().str());
  const Tensor xc = x.data().contiguous();
  Tensor cols = empty({xs[1] * ws[2] * ws[3], L}, DType::Float32, dev);
  cuda::im2col(dev.index, N, xs[1], xs[2], xs[3], ws[2], ws[3], stride, padding, xc.data<float>(), cols.data<float>(),
               /*batch_in_columns=*/true);
  const Tensor w2 = weight.data().reshape({O, -1});
  Tensor out2 = matmul(w2, cols);  // (O, N*OH*OW)
  if (bias.defined()) add_(out2, bias.data().reshape({O, 1}));
  const Tensor out = out2.reshape({O, N, OH, OW}).permute({1, 0, 2, 3}).contiguous();
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return autograd::record("conv2d", out, inputs, [=](const Tensor& g, const Needs& n) {
    const Tensor g2 = g.permute({1, 0, 2, 3}).contiguous().reshape({O, L});  // (O, N*OH*OW)
    Grads grads(n.size());
    if (n[0]) {
      const Tensor dcols = matmul(w2.transpose(0, 1), g2);  // (C*kh*kw, N*OH*OW)
      Tensor dx = empty(xs, DType::Float32, dev);
      cuda::col2im(dev.index, N, xs[1], xs[2], xs[3], ws[2], ws[3], stride, padding, dcols.data<float>(),
                   dx.data<float>(), /*batch_in_columns=*/true);
      grads[0] = dx;
    }
    if (n[1]) grads[1] = matmul(g2, cols.transpose(0, 1)).reshape(ws);  // cols^T read in place
    if (n.size() > 2 && n[2]) grads[2] = sum(g2, {1});
    return grads;
  });
}
}  // namespace

Variable conv2d(const Variable& x, const Variable& weight, const Variable& bias, int64_t stride, int64_t padding) {
  const Shape xs = x.shape(), ws = weight.shape();
  ENGINE_REQUIRE(ws.size() == 4, "[conv2d] weight must be (O, C, kh, kw), got ", shape_str(ws));
  check_window("conv2d", xs, ws[2], ws[3], stride, padding);
  ENGINE_REQUIRE(xs[1] == ws[1], "[conv2d] input has ", xs[1], " channels but the weight expects ", ws[1],
                 " (input ", shape_str(xs), ", weight ", shape_str(ws), ")");
  const int64_t N = xs[0], O = ws[0], OH = out_size(xs[2], ws[2], stride, padding), OW = out_size(xs[3], ws[3], stride, padding);
  if (x.data().device().is_cuda()) return conv2d_cuda(x, weight, bias, stride, padding, OH, OW);
  // out[n] (O, OH*OW) = W (O, C*kh*kw) @ cols[n] (C*kh*kw, OH*OW)
  const Tensor cols = im2col(x.data(), ws[2], ws[3], stride, padding);
  const Tensor w2 = weight.data().reshape({O, -1});
  Tensor out = matmul(w2, cols);  // (N, O, OH*OW), the weight broadcast over the batch
  if (bias.defined()) out = out + bias.data().reshape({O, 1});
  out = out.reshape({N, O, OH, OW});
  std::vector<Variable> inputs{x, weight};
  if (bias.defined()) inputs.push_back(bias);
  return autograd::record("conv2d", out, inputs, [=](const Tensor& g, const Needs& n) {
    const Tensor g3 = g.reshape({N, O, OH * OW});
    Grads grads(n.size());
    // d cols[n] = W^T @ g[n], then col2im puts each entry back where im2col took it from.
    if (n[0]) grads[0] = col2im(matmul(w2.transpose(0, 1), g3), xs, ws[2], ws[3], stride, padding);
    // dW = sum_n g[n] @ cols[n]^T
    if (n[1]) grads[1] = sum(matmul(g3, cols.transpose(1, 2)), {0}).reshape(ws);
    if (n.size() > 2 && n[2]) grads[2] = sum(g3, {0, 2});
    return grads;
  });
}

namespace {
// max_pool2d on a GPU: the same forward and backward as below, as two kernels.
Variable max_pool2d_cuda(const Variable& x, const Tensor& xc, int64_t kernel, int64_t stride, int64_t padding,
                         int64_t OH, int64_t OW) {
  const Shape xs = xc.shape();
  const Device dev = xc.device();
  Tensor out = empty({xs[0], xs[1], OH, OW}, DType::Float32, dev);
  Tensor where = empty({xs[0], xs[1], OH, OW}, DType::Int64, dev);
  cuda::max_pool2d_forward(dev.index, xs[0] * xs[1], xs[2], xs[3], OH, OW, kernel, stride, padding, xc.data<float>(),
                           out.data<float>(), where.data<int64_t>());
  return autograd::record("max_pool2d", out, {x}, [xs, where, dev](const Tensor& g, const Needs&) {
    Tensor dx = zeros(xs, DType::Float32, dev);
    const Tensor gc = g.contiguous();
    cuda::max_pool2d_backward(dev.index, gc.numel(), gc.data<float>(), where.data<int64_t>(), dx.data<float>());
    return Grads{dx};
  });
}
}  // namespace

Variable max_pool2d(const Variable& x, int64_t kernel, int64_t stride, int64_t padding) {
  const Shape xs = x.shape();
  check_window("max_pool2d", xs, kernel, kernel, stride, padding);
  ENGINE_REQUIRE(padding * 2 <= kernel, "[max_pool2d] padding ", padding, " must be at most half the kernel ", kernel);
  const int64_t N = xs[0], C = xs[1], H = xs[2], W = xs[3];
  const int64_t OH = out_size(H, kernel, stride, padding), OW = out_size(W, kernel, stride, padding);
  const Tensor xc = x.data().contiguous();
  if (xc.device().is_cuda()) return max_pool2d_cuda(x, xc, kernel, stride, padding, OH, OW);
  Tensor out = empty({N, C, OH, OW});
  Tensor where = empty({N, C, OH, OW}, DType::Int64);  // flat input index of each maximum
  const float* in = xc.data<float>();
  float* o = out.data<float>();
  int64_t* arg = where.data<int64_t>();
  for (int64_t plane = 0; plane < N * C; ++plane)
    for (int64_t oy = 0; oy < OH; ++oy) {
      // The window's rows, clipped to the image (padding never wins a max).
      const int64_t y0 = std::max<int64_t>(oy * stride - padding, 0), y1 = std::min(oy * stride - padding + kernel, H);
      for (int64_t ox = 0; ox < OW; ++ox) {
        const int64_t x0 = std::max<int64_t>(ox * stride - padding, 0), x1 = std::min(ox * stride - padding + kernel, W);
        int64_t best_at = (plane * H + y0) * W + x0;
        float best = in[best_at];
        for (int64_t y = y0; y < y1; ++y) {
          const float* row = in + (plane * H + y) * W;
          for (int64_t xx = x0; xx < x1; ++xx)  // the first NaN wins, as in PyTorch
            if (row[xx] > best || (row[xx] != row[xx] && best == best)) best = row[xx], best_at = row + xx - in;
        }
        const int64_t k = (plane * OH + oy) * OW + ox;
        o[k] = best;
        arg[k] = best_at;
      }
    }
  return autograd::record("max_pool2d", out, {x}, [xs, where](const Tensor& g, const Needs&) {
    Tensor dx = zeros(xs);
    float* d = dx.data<float>();
    const Tensor gc = g.contiguous();
    const float* pg = gc.data<float>();
    const int64_t* arg = where.data<int64_t>();
    for (int64_t k = 0; k < gc.numel(); ++k) d[arg[k]] += pg[k];
    return Grads{dx};
  });
}

Variable dropout(const Variable& x, double p, bool training, Generator* gen) {
  ENGINE_REQUIRE(p >= 0 && p < 1, "[dropout] probability must be in [0, 1), got ", p);
  if (!training || p == 0) return x;
  // mask = 1/(1-p) where kept, 0 where dropped, so the expected value is unchanged.
  const Tensor mask = ge(rand(x.shape(), gen, x.data().device()), scalar_tensor(p)) * (1.0 / (1.0 - p));
  return autograd::mul(x, Variable(mask));
}

}  // namespace engine::nn
