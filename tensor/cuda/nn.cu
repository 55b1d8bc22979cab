// Neural-network kernels of tensor/cuda/kernels.h: softmax cross-entropy, im2col and
// col2im, max pooling. Kernels first, launchers after.
#include <cuda_runtime.h>

#include <cfloat>
#include <cstdint>

#include "tensor/check.h"
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

// Both column layouts are made of planes, one per (row (c, i, j), image n), each holding
// that row's OH*OW window positions contiguously: plane row * N + n with the batch side by
// side, n * rows + row per image.
__device__ __forceinline__ int64_t plane_of(bool batch_in_columns, int64_t rows, int64_t N, int64_t row, int64_t n) {
  return batch_in_columns ? row * N + n : n * rows + row;
}

// im2col and col2im give a block one image channel (n, ch) at a time and a thread one
// position of it, and the thread handles every tap (i, j) of the window there. The taps'
// loads are independent, so with the window size known when compiled (KH, KW > 0; 0: read
// kh, kw at run time) they are all in flight at once. One thread per column entry, with one
// load each and six 64-bit divisions to find it, ran 8x slower than writing the columns:
// each thread waited out a whole memory latency for a single element.
template <int KH, int KW>
__global__ void im2col_kernel(int64_t N, int64_t C, int H, int W, int kh_, int kw_, int s, int p, int OH, int OW,
                              const float* x, float* cols, bool batch_in_columns) {
  const int kh = KH ? KH : kh_, kw = KW ? KW : kw_;
  const int64_t rows = C * kh * kw, L = int64_t(OH) * OW;
  for (int64_t b = blockIdx.x; b < N * C; b += gridDim.x) {
    const int64_t n = b / C, ch = b % C;
    const float* image = x + b * H * W;
    for (int pos = threadIdx.x; pos < OH * OW; pos += blockDim.x) {
      const int oy = pos / OW, ox = pos - oy * OW;
#pragma unroll
      for (int i = 0; i < kh; ++i) {
        const int y = oy * s + i - p;
#pragma unroll
        for (int j = 0; j < kw; ++j) {
          const int xx = ox * s + j - p;
          const float v = (y >= 0 && y < H && xx >= 0 && xx < W) ? image[y * W + xx] : 0.f;  // padding reads as 0
          cols[plane_of(batch_in_columns, rows, N, (ch * kh + i) * kw + j, n) * L + pos] = v;
        }
      }
    }
  }
}

// One thread per pixel gathers every cols entry im2col copied it to, in (i, j) order: no two
// threads write the same pixel, so no atomics, and the sum order is fixed. With the stride
// known when compiled (S > 0) the window arithmetic needs no division.
template <int KH, int KW, int S>
__global__ void col2im_kernel(int64_t N, int64_t C, int H, int W, int kh_, int kw_, int s_, int p, int OH, int OW,
                              const float* cols, float* x, bool batch_in_columns) {
  const int kh = KH ? KH : kh_, kw = KW ? KW : kw_, s = S ? S : s_;
  const int64_t rows = C * kh * kw, L = int64_t(OH) * OW;
  for (int64_t b = blockIdx.x; b < N * C; b += gridDim.x) {
    const int64_t n = b / C, ch = b % C;
    float* out = x + b * H * W;
    for (int pix = threadIdx.x; pix < H * W; pix += blockDim.x) {
      const int y = pix / W, xx = pix - y * W;
      float acc = 0;
#pragma unroll
      for (int i = 0; i < kh; ++i) {
        const int ty = y + p - i;  // = oy * s
#pragma unroll
        for (int j = 0; j < kw; ++j) {
          const int tx = xx + p - j;
          const bool hit = ty >= 0 && ty % s == 0 && ty / s < OH && tx >= 0 && tx % s == 0 && tx / s < OW;
          if (hit)
            acc += cols[plane_of(batch_in_columns, rows, N, (ch * kh + i) * kw + j, n) * L + (ty / s) * OW + tx / s];
        }
      }
      out[pix] = acc;
    }
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

namespace {
// Threads per block for `n` positions of an image channel: whole warps, at most kThreads.
int channel_threads(int64_t n) { return int(std::min<int64_t>(kThreads, (n + 31) / 32 * 32)); }
// Blocks for `channels` image channels: one each, up to 64 per multiprocessor (then they loop).
unsigned channel_blocks(int64_t channels, int device) {
  return unsigned(std::min<int64_t>(channels, int64_t(multiprocessor_count(device)) * 64));
}
}  // namespace

void im2col(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* x, float* cols, bool batch_in_columns) {
  const int64_t OH = (H + 2 * padding - kh) / stride + 1, OW = (W + 2 * padding - kw) / stride + 1;
  if (N * C * kh * kw * OH * OW == 0) return;
  ENGINE_REQUIRE(H * W < INT32_MAX && OH * OW < INT32_MAX, "[im2col] an image of ", H, " x ", W,
                 " is too large for the GPU kernel");
  auto kernel = kh == 3 && kw == 3 ? im2col_kernel<3, 3> : im2col_kernel<0, 0>;  // 3 x 3: the common case
  kernel<<<channel_blocks(N * C, device), channel_threads(OH * OW), 0, stream_of(device)>>>(
      N, C, int(H), int(W), int(kh), int(kw), int(stride), int(padding), int(OH), int(OW), x, cols, batch_in_columns);
  check_launch("im2col_kernel");
}

void col2im(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t kh, int64_t kw, int64_t stride,
            int64_t padding, const float* cols, float* x, bool batch_in_columns) {
  const int64_t OH = (H + 2 * padding - kh) / stride + 1, OW = (W + 2 * padding - kw) / stride + 1;
  if (N * C * H * W == 0) return;
  ENGINE_REQUIRE(H * W < INT32_MAX && OH * OW < INT32_MAX, "[col2im] an image of ", H, " x ", W,
                 " is too large for the GPU kernel");
  auto kernel = kh == 3 && kw == 3 && stride == 1 ? col2im_kernel<3, 3, 1> : col2im_kernel<0, 0, 0>;
  kernel<<<channel_blocks(N * C, device), channel_threads(H * W), 0, stream_of(device)>>>(
      N, C, int(H), int(W), int(kh), int(kw), int(stride), int(padding), int(OH), int(OW), cols, x, batch_in_columns);
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
