// The GPU convolution's forward as an implicit GEMM: the steps one thread takes, written
// once for the CUDA kernel (conv.cu) and for the CPU test that runs every thread of every
// block in turn (tests/tensor/conv_tiles_test.cc).
//
// A convolution is out[o][p] = sum over k of w[o][k] * cols[k][p] + bias[o], where p runs
// over output pixels (n, oy, ox) and k over one window's inputs (c, i, j): the GEMM of
// im2col. Here cols is never written to memory. Each block owns a 64 x 128 tile of out
// (64 output channels, 128 pixels) and walks k in slices of 16:
//   1. describe_slice: 16 threads turn the slice's k into (c, i, j) and an input offset;
//   2. load_tiles: every thread copies its share of the slice's weights (64 x 16) and of
//      its pixels' window values (16 x 128, 0 in the padding) into shared memory;
//   3. multiply_tiles: every thread adds the products for its 4 channels x 8 pixels.
// A barrier separates the steps. At the end store_tile writes (N, O, OH, OW) with the bias.
//
//   ConvGeometry g = conv_geometry(N, C, H, W, O, kh, kw, stride, padding);
//   grid (blocks_along_pixels(g), blocks_along_channels(g)), kThreads threads each.
#pragma once

#include <cstdint>

#ifdef __CUDACC__
#define ENGINE_HD __host__ __device__ __forceinline__
#define ENGINE_UNROLL _Pragma("unroll")
#else
#define ENGINE_HD inline
#define ENGINE_UNROLL
#endif

namespace engine::cuda::conv_tiles {

constexpr int kBM = 64;          // output channels per block
constexpr int kBN = 128;         // output pixels per block
constexpr int kBK = 16;          // window inputs per slice
constexpr int kThreads = 256;    // 16 x 16 threads, each computing kTM x kTN outputs
constexpr int kTM = 4, kTN = 8;  // 64 = 16 * 4 channels, 128 = 16 * 8 pixels

struct ConvGeometry {
  int64_t N, C, H, W, O, kh, kw, stride, padding, OH, OW;
  int64_t K, P;  // window inputs (C * kh * kw) and output pixels (N * OH * OW)
};

inline ConvGeometry conv_geometry(int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                                  int64_t stride, int64_t padding) {
  const int64_t OH = (H + 2 * padding - kh) / stride + 1, OW = (W + 2 * padding - kw) / stride + 1;
  return {N, C, H, W, O, kh, kw, stride, padding, OH, OW, C * kh * kw, N * OH * OW};
}
inline int64_t blocks_along_pixels(const ConvGeometry& g) { return (g.P + kBN - 1) / kBN; }
inline int64_t blocks_along_channels(const ConvGeometry& g) { return (g.O + kBM - 1) / kBM; }

// One block's shared memory.
struct alignas(16) Tiles {
  float a[kBK][kBM];       // a[kk][m] = w[m0 + m][k0 + kk]
  float b[kBK][kBN];       // b[kk][n] = window input k0 + kk of pixel p0 + n
  int64_t offset[kBK];     // input k0 + kk's offset from its window's corner: (c * H + i) * W + j
  int32_t i[kBK], j[kBK];  // its row and column in the window; i = -1 past the end of k
};

// Where a thread's pixel (one of the block's 128, fixed for the whole walk over k) reads
// from: its image, and its window's top-left corner (negative in the padding).
struct Pixel {
  bool valid;
  int64_t image;  // offset of image n in x
  int64_t y0, x0;
};

ENGINE_HD Pixel pixel_of(const ConvGeometry& g, int64_t p) {
  if (p >= g.P) return {false, 0, 0, 0};
  const int64_t per_image = g.OH * g.OW, n = p / per_image, q = p % per_image;
  return {true, n * g.C * g.H * g.W, (q / g.OW) * g.stride - g.padding, (q % g.OW) * g.stride - g.padding};
}

// Step 1 (threads t < kBK): input k0 + t of every window.
ENGINE_HD void describe_slice(const ConvGeometry& g, int64_t k0, int t, Tiles& s) {
  const int64_t k = k0 + t;
  if (k >= g.K) {
    s.offset[t] = 0, s.i[t] = -1, s.j[t] = 0;
    return;
  }
  const int64_t area = g.kh * g.kw, c = k / area, r = k % area, i = r / g.kw, j = r % g.kw;
  s.offset[t] = (c * g.H + i) * g.W + j;
  s.i[t] = int32_t(i), s.j[t] = int32_t(j);
}

// Step 2 (every thread): 4 weights and 8 window inputs. Weights: thread t reads 4
// consecutive k of channel m0 + t / 4 (w is (O, K) row by row, so a warp reads whole
// rows). Inputs: thread t reads for pixel p0 + t % 128 the slice's rows t / 128, + 2, ...
// (a warp reads 32 neighbouring pixels: neighbouring addresses where the stride is 1).
ENGINE_HD void load_tiles(const ConvGeometry& g, const float* x, const float* w, int64_t m0, int64_t k0,
                          const Pixel& px, int t, Tiles& s) {
  const int m = t / 4, kk0 = (t % 4) * 4;
  const int64_t o = m0 + m;
  ENGINE_UNROLL
  for (int r = 0; r < 4; ++r) {
    const int64_t k = k0 + kk0 + r;
    s.a[kk0 + r][m] = o < g.O && k < g.K ? w[o * g.K + k] : 0.f;
  }
  const int n = t % kBN;
  ENGINE_UNROLL
  for (int r = 0; r < kBK / 2; ++r) {
    const int kk = t / kBN + 2 * r;
    const int64_t y = px.y0 + s.i[kk], xx = px.x0 + s.j[kk];
    const bool inside = px.valid && s.i[kk] >= 0 && y >= 0 && y < g.H && xx >= 0 && xx < g.W;
    s.b[kk][n] = inside ? x[px.image + px.y0 * g.W + px.x0 + s.offset[kk]] : 0.f;
  }
}

// The 4 output channels and 8 pixels thread t computes: channels 4 * (t / 16) + 0..3,
// pixels 4 * (t % 16) + 0..3 and 64 + 4 * (t % 16) + 0..3 (two runs of 4, so that the 16
// threads of a half-warp read 64 neighbouring floats of a tile row at once).
ENGINE_HD int tile_row(int t, int i) { return (t / 16) * kTM + i; }
ENGINE_HD int tile_column(int t, int j) { return (j < 4 ? 0 : kBN / 2 - 4) + (t % 16) * 4 + j; }

// Four neighbouring floats of a tile (16-byte aligned): one shared-memory load on the GPU.
ENGINE_HD void load4(const float* p, float* out) {
#ifdef __CUDA_ARCH__
  const float4 v = *reinterpret_cast<const float4*>(p);
  out[0] = v.x, out[1] = v.y, out[2] = v.z, out[3] = v.w;
#else
  for (int i = 0; i < 4; ++i) out[i] = p[i];
#endif
}

// Step 3 (every thread): acc[i][j] += sum over the slice of a[kk][row i] * b[kk][column j].
ENGINE_HD void multiply_tiles(const Tiles& s, int t, float (&acc)[kTM][kTN]) {
  ENGINE_UNROLL
  for (int kk = 0; kk < kBK; ++kk) {
    float a[kTM], b[kTN];
    load4(&s.a[kk][tile_row(t, 0)], a);
    load4(&s.b[kk][tile_column(t, 0)], b);
    load4(&s.b[kk][tile_column(t, 4)], b + 4);
    ENGINE_UNROLL
    for (int i = 0; i < kTM; ++i) {
      ENGINE_UNROLL
      for (int j = 0; j < kTN; ++j) acc[i][j] += a[i] * b[j];
    }
  }
}

// Last (every thread): its outputs, plus the bias, into out (N, O, OH, OW).
ENGINE_HD void store_tile(const ConvGeometry& g, const float (&acc)[kTM][kTN], const float* bias, int64_t m0,
                          int64_t p0, int t, float* out) {
  const int64_t per_image = g.OH * g.OW;
  for (int j = 0; j < kTN; ++j) {
    const int64_t p = p0 + tile_column(t, j);
    if (p >= g.P) continue;
    const int64_t n = p / per_image, q = p % per_image;
    for (int i = 0; i < kTM; ++i) {
      const int64_t o = m0 + tile_row(t, i);
      if (o < g.O) out[(n * g.O + o) * per_image + q] = acc[i][j] + (bias ? bias[o] : 0.f);
    }
  }
}

}  // namespace engine::cuda::conv_tiles
