// Neural-network kernels of tensor/cuda/kernels.h: softmax cross-entropy, im2col and
// col2im, max pooling. Kernels first, launchers after.
#include <cuda_runtime.h>

#include <cfloat>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

// ---------------------------------------------------------------------------------------
// Kernels

__device__ __forceinline__ float warp_max(float v) {
  for (int d = 16; d > 0; d /= 2) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, d));
  return v;
}
__device__ __forceinline__ float warp_sum(float v) {
  for (int d = 16; d > 0; d /= 2) v += __shfl_xor_sync(0xffffffffu, v, d);
  return v;
}

// One warp per row: the row's max m, then s = sum exp(x - m), probs = exp(x - m) / s, and
// loss = log(s) + (m - x[t]): both terms >= 0, so nothing cancels. When the target holds
// the max, s = 1 + (the others' sum) and log(s) = log1p(others) keeps the digits a loss
// near 0 has. rest[i] = 1 - probs[t] computed as others / s, for the same reason in the
// gradient.
__global__ void cross_entropy_forward_kernel(int64_t n, int64_t c, const float* logits, const int64_t* targets,
                                             int64_t ignore_index, float* probs, float* loss, float* rest,
                                             float* counted, int64_t* bad_row) {
  const int64_t row = blockIdx.x * int64_t(blockDim.x / 32) + threadIdx.x / 32;
  const int lane = threadIdx.x % 32;
  if (row >= n) return;
  const float* x = logits + row * c;
  const int64_t t = targets[row];
  const bool ignored = t == ignore_index, valid = t >= 0 && t < c;
  float m = -INFINITY;
  for (int64_t j = lane; j < c; j += 32) m = fmaxf(m, x[j]);
  m = warp_max(m);
  float s = 0, others = 0;
  for (int64_t j = lane; j < c; j += 32) {
    const float e = expf(x[j] - m);
    s += e;
    if (j != t) others += e;
  }
  s = warp_sum(s), others = warp_sum(others);
  for (int64_t j = lane; j < c; j += 32) probs[row * c + j] = expf(x[j] - m) / s;
  if (lane == 0) {
    counted[row] = ignored ? 0.0f : 1.0f;
    if (ignored) {  // a padding row: no loss, no gradient, not in the mean
      loss[row] = 0, rest[row] = 0;
    } else if (!valid) {
      atomicCAS(reinterpret_cast<unsigned long long*>(bad_row), 0xffffffffffffffffull, (unsigned long long)row);
      loss[row] = NAN, rest[row] = NAN;
    } else {
      loss[row] = x[t] == m && isfinite(m) ? log1pf(others) : logf(s) + (m - x[t]);
      rest[row] = others / s;
    }
  }
}

// dx = (probs - onehot(t)) * g / counted, with probs[t] - 1 taken as -rest (no
// cancellation); 0 on ignored rows.
__global__ void cross_entropy_backward_kernel(int64_t n, int64_t c, const float* probs, const float* rest,
                                              const int64_t* targets, int64_t ignore_index, const float* grad_out,
                                              const float* counted, float* dx) {
  const float scale = grad_out[0] / counted[0];
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < n * c; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t i = k / c, j = k % c;
    dx[k] = targets[i] == ignore_index ? 0.0f : (targets[i] == j ? -rest[i] : probs[k]) * scale;
  }
}

// Where entry (n, c, i, j, oy, ox) of the columns lives: (n, (c,i,j), (oy,ox)) per image,
// or ((c,i,j), (n,oy,ox)) with the batch side by side.
__device__ __forceinline__ int64_t col_index(bool batch_in_columns, int64_t N, int64_t C, int64_t kh, int64_t kw,
                                             int64_t OH, int64_t OW, int64_t n, int64_t ch, int64_t i, int64_t j,
                                             int64_t oy, int64_t ox) {
  const int64_t row = (ch * kh + i) * kw + j, pos = oy * OW + ox;
  return batch_in_columns ? row * (N * OH * OW) + n * OH * OW + pos : (n * C * kh * kw + row) * OH * OW + pos;
}

// One thread per entry of cols, walked in its memory order; padding reads as 0.
__global__ void im2col_kernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t s, int64_t p,
                              int64_t OH, int64_t OW, const float* x, float* cols, bool batch_in_columns) {
  const int64_t total = N * C * kh * kw * OH * OW;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(blockDim.x) * gridDim.x) {
    int64_t r = k;
    const int64_t ox = r % OW;
    r /= OW;
    const int64_t oy = r % OH;
    r /= OH;
    int64_t n, ch, i, j;
    if (batch_in_columns) {  // k = ((c,i,j), n, oy, ox)
      n = r % N;
      r /= N;
      j = r % kw;
      r /= kw;
      i = r % kh;
      ch = r / kh;
    } else {  // k = (n, (c,i,j), oy, ox)
      j = r % kw;
      r /= kw;
      i = r % kh;
      r /= kh;
      ch = r % C, n = r / C;
    }
    const int64_t y = oy * s + i - p, xx = ox * s + j - p;
    cols[k] = (y >= 0 && y < H && xx >= 0 && xx < W) ? x[((n * C + ch) * H + y) * W + xx] : 0.f;
  }
}

// One thread per image pixel, gathering every cols entry im2col copied it to: no two
// threads write the same pixel, so no atomics and the sum order is fixed.
__global__ void col2im_kernel(int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t s, int64_t p,
                              int64_t OH, int64_t OW, const float* cols, float* x, bool batch_in_columns) {
  const int64_t total = N * C * H * W;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(blockDim.x) * gridDim.x) {
    int64_t r = k;
    const int64_t xx = r % W;
    r /= W;
    const int64_t y = r % H;
    r /= H;
    const int64_t ch = r % C, n = r / C;
    float acc = 0;
    for (int64_t i = 0; i < kh; ++i) {
      const int64_t ty = y + p - i;  // = oy * s
      if (ty < 0 || ty % s != 0 || ty / s >= OH) continue;
      for (int64_t j = 0; j < kw; ++j) {
        const int64_t tx = xx + p - j;
        if (tx < 0 || tx % s != 0 || tx / s >= OW) continue;
        acc += cols[col_index(batch_in_columns, N, C, kh, kw, OH, OW, n, ch, i, j, ty / s, tx / s)];
      }
    }
    x[k] = acc;
  }
}

__global__ void max_pool2d_forward_kernel(int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t kernel,
                                          int64_t s, int64_t p, const float* in, float* out, int64_t* where) {
  const int64_t total = planes * OH * OW;
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < total; k += int64_t(blockDim.x) * gridDim.x) {
    const int64_t ox = k % OW, oy = (k / OW) % OH, plane = k / (OW * OH);
    const int64_t y0 = max(oy * s - p, int64_t(0)), y1 = min(oy * s - p + kernel, H);
    const int64_t x0 = max(ox * s - p, int64_t(0)), x1 = min(ox * s - p + kernel, W);
    int64_t best_at = (plane * H + y0) * W + x0;
    float best = in[best_at];
    for (int64_t y = y0; y < y1; ++y)
      for (int64_t x = x0; x < x1; ++x) {
        const int64_t at = (plane * H + y) * W + x;
        const float v = in[at];
        if (v > best || (v != v && best == best)) best = v, best_at = at;  // the first NaN wins, as on the CPU
      }
    out[k] = best;
    where[k] = best_at;
  }
}

__global__ void max_pool2d_backward_kernel(int64_t count, const float* g, const int64_t* where, float* dx) {
  for (int64_t k = blockIdx.x * int64_t(blockDim.x) + threadIdx.x; k < count; k += int64_t(blockDim.x) * gridDim.x)
    atomicAdd(dx + where[k], g[k]);  // overlapping windows may pick the same input
}

// ---------------------------------------------------------------------------------------
// Launchers

namespace {
constexpr int kThreads = 256;
}

void cross_entropy_forward(int device, int64_t n, int64_t c, const float* logits, const int64_t* targets,
                           int64_t ignore_index, float* probs, float* loss, float* rest, float* counted,
                           int64_t* bad_row) {
  if (n == 0) return;
  const int rows_per_block = kThreads / 32;
  cross_entropy_forward_kernel<<<unsigned((n + rows_per_block - 1) / rows_per_block), kThreads, 0, stream_of(device)>>>(
      n, c, logits, targets, ignore_index, probs, loss, rest, counted, bad_row);
  check_launch("cross_entropy_forward_kernel");
}

void cross_entropy_backward(int device, int64_t n, int64_t c, const float* probs, const float* rest,
                            const int64_t* targets, int64_t ignore_index, const float* grad_out, const float* counted,
                            float* dx) {
  if (n * c == 0) return;
  cross_entropy_backward_kernel<<<blocks_for(n * c, kThreads, device), kThreads, 0, stream_of(device)>>>(
      n, c, probs, rest, targets, ignore_index, grad_out, counted, dx);
  check_launch("cross_entropy_backward_kernel");
}

void im2col(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* x, float* cols, bool batch_in_columns) {
  const int64_t OH = (H + 2 * padding - kh) / stride + 1, OW = (W + 2 * padding - kw) / stride + 1;
  const int64_t total = N * C * kh * kw * OH * OW;
  if (total == 0) return;
  im2col_kernel<<<blocks_for(total, kThreads, device), kThreads, 0, stream_of(device)>>>(
      N, C, H, W, kh, kw, stride, padding, OH, OW, x, cols, batch_in_columns);
  check_launch("im2col_kernel");
}

void col2im(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* cols, float* x, bool batch_in_columns) {
  const int64_t OH = (H + 2 * padding - kh) / stride + 1, OW = (W + 2 * padding - kw) / stride + 1;
  const int64_t total = N * C * H * W;
  if (total == 0) return;
  col2im_kernel<<<blocks_for(total, kThreads, device), kThreads, 0, stream_of(device)>>>(
      N, C, H, W, kh, kw, stride, padding, OH, OW, cols, x, batch_in_columns);
  check_launch("col2im_kernel");
}

void max_pool2d_forward(int device, int64_t planes, int64_t H, int64_t W, int64_t OH, int64_t OW, int64_t kernel,
                        int64_t stride, int64_t padding, const float* x, float* out, int64_t* where) {
  const int64_t total = planes * OH * OW;
  if (total == 0) return;
  max_pool2d_forward_kernel<<<blocks_for(total, kThreads, device), kThreads, 0, stream_of(device)>>>(
      planes, H, W, OH, OW, kernel, stride, padding, x, out, where);
  check_launch("max_pool2d_forward_kernel");
}

void max_pool2d_backward(int device, int64_t out_count, const float* g, const int64_t* where, float* dx) {
  if (out_count == 0) return;
  max_pool2d_backward_kernel<<<blocks_for(out_count, kThreads, device), kThreads, 0, stream_of(device)>>>(out_count, g,
                                                                                                          where, dx);
  check_launch("max_pool2d_backward_kernel");
}

}  // namespace engine::cuda
