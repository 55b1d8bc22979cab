// The convolution forward of tensor/cuda/kernels.h as an implicit GEMM: the tile steps of
// conv_tiles.h, separated by barriers. No column matrix is written: each block gathers the
// window inputs it needs into shared memory, slice by slice.
#include <cuda_runtime.h>

#include "tensor/cuda/check.cuh"
#include "tensor/cuda/conv_tiles.h"
#include "tensor/cuda/kernels.h"

namespace engine::cuda {

using namespace conv_tiles;

__global__ void __launch_bounds__(kThreads)
    conv2d_forward_kernel(ConvGeometry g, const float* x, const float* w, const float* bias, float* out) {
  __shared__ Tiles s;
  const int t = int(threadIdx.x);
  const int64_t p0 = int64_t(blockIdx.x) * kBN, m0 = int64_t(blockIdx.y) * kBM;
  const Pixel px = pixel_of(g, p0 + t % kBN);
  float acc[kTM][kTN] = {};
  for (int64_t k0 = 0; k0 < g.K; k0 += kBK) {
    if (t < kBK) describe_slice(g, k0, t, s);
    __syncthreads();
    load_tiles(g, x, w, m0, k0, px, t, s);
    __syncthreads();
    multiply_tiles(s, t, acc);
    __syncthreads();  // the next slice overwrites the tiles
  }
  store_tile(g, acc, bias, m0, p0, t, out);
}

void conv2d_forward(int device, int64_t N, int64_t C, int64_t H, int64_t W, int64_t O, int64_t kh, int64_t kw,
                    int64_t stride, int64_t padding, const float* x, const float* w, const float* bias, float* out) {
  const ConvGeometry g = conv_geometry(N, C, H, W, O, kh, kw, stride, padding);
  if (g.P == 0 || g.O == 0) return;
  check(blocks_along_pixels(g) <= 0x7fffffff && blocks_along_channels(g) <= 65535 ? cudaSuccess
                                                                                  : cudaErrorInvalidConfiguration,
        "conv2d_forward (too many output pixels or channels for one launch)");
  const dim3 grid(unsigned(blocks_along_pixels(g)), unsigned(blocks_along_channels(g)));
  conv2d_forward_kernel<<<grid, kThreads, 0, stream_of(device)>>>(g, x, w, bias, out);
  check_launch("conv2d_forward_kernel");
}

}  // namespace engine::cuda
