// The bfloat16 GEMM (gemm_bf16.h): the blocking of gemm.cc around a 32 x 32 micro-kernel
// (AMX tiles, or AVX-512 BF16 on AMD's cores where there is no AMX); elsewhere the
// operands are widened to float32 for gemm() (gemm_portable).
//
//   for jc in steps of NC over N:        pack B(pc.., jc..) as 32-column panels of pairs
//     for pc in steps of KC over K:
//       for ic in steps of MC over M:    pack A(ic.., pc..) as 32-row panels, row-major
//         for each 32 x 32 block of C:   the tile kernel over the KC slice
//
// K is padded with zeros to a multiple of 32 (one tile's depth), M and N to whole 32-wide
// panels, so the kernel never sees a ragged edge; edge blocks of C go through a 32 x 32
// scratch block.
#include "tensor/gemm_bf16.h"

#include <algorithm>
#include <cstring>
#include <memory>
#include <utility>
#include <vector>

#include "tensor/check.h"
#include "tensor/gemm.h"
#include "tensor/gemm_amx.h"
#include "tensor/gemm_dpbf16.h"
#include "tensor/gemm_kernels.h"
#include "tensor/half_convert.h"

namespace engine {
namespace {

constexpr int64_t kTile = 32;                        // the micro-kernel's block of C and step along k
constexpr int64_t kKC = 512, kMC = 128, kNC = 1024;  // A block 128 x 512 x 2 B = 128 KiB (L2)

int64_t round_up(int64_t x, int64_t m) { return (x + m - 1) / m * m; }

// Rows [0, mc) x cols [0, kc) of A as 32-row panels, each row kcp (kc rounded up to 32)
// values long; rows past mc and columns past kc are zero. Row-major A (csa == 1) copies
// rows whole; transposed A (rsa == 1) walks down its contiguous columns.
void pack_a(int64_t mc, int64_t kc, int64_t kcp, const bfloat16* A, int64_t rsa, int64_t csa, uint16_t* Ap) {
  const int64_t rows = round_up(mc, kTile);
  std::memset(Ap, 0, size_t(rows * kcp) * 2);
  const uint16_t* a = reinterpret_cast<const uint16_t*>(A);
  if (csa == 1) {
    for (int64_t i = 0; i < mc; ++i) std::memcpy(Ap + i * kcp, a + i * rsa, size_t(kc) * 2);
  } else if (rsa == 1) {
    // A stored transposed: a transpose, in blocks of 64 k so that the 64 lines read (each
    // holding 32 rows' values) stay in L1 while every row of the block is written in order.
    for (int64_t k0 = 0; k0 < kc; k0 += 64)
      for (int64_t i = 0; i < mc; ++i)
        for (int64_t k = k0, k_end = std::min(kc, k0 + 64); k < k_end; ++k) Ap[i * kcp + k] = a[k * csa + i];
  } else {
    for (int64_t i = 0; i < mc; ++i)
      for (int64_t k = 0; k < kc; ++k) Ap[i * kcp + k] = a[i * rsa + k * csa];
  }
}

// Rows [0, kc) x cols [0, nc) of B as 32-column panels of pairs: panel q, pair row p holds
// B[2p, j], B[2p+1, j] for j in the panel's 32 columns, as one 32-bit word (low half
// first). Zero past kc and nc. Row-major B (csb == 1) merges two rows at a time; B stored
// transposed (rsb == 1) already has each pair side by side in its columns.
void pack_b(int64_t kc, int64_t kcp, int64_t nc, const bfloat16* B, int64_t rsb, int64_t csb, uint16_t* Bp) {
  const uint16_t* b = reinterpret_cast<const uint16_t*>(B);
  for (int64_t q = 0; q < nc; q += kTile, Bp += kcp * kTile) {
    const int64_t cols = std::min(kTile, nc - q);
    uint32_t* dst = reinterpret_cast<uint32_t*>(Bp);  // kcp/2 rows of 32 words
    std::memset(dst, 0, size_t(kcp / 2 * kTile) * 4);
    if (rsb == 1 && csb % 2 == 0 && kc % 2 == 0 && reinterpret_cast<uintptr_t>(b) % 4 == 0 &&
        gemm_kernel_supported(GemmKernel::Avx2)) {
      // Each column's pairs are 32-bit words, so the panel is a transpose of 32-bit words:
      // the float32 GEMM's 8x8 register transpose does it, moving bits, not values.
      detail::pack_b_columns_avx2(int(kTile), kc / 2, cols, reinterpret_cast<const float*>(b + q * csb), csb / 2,
                                  reinterpret_cast<float*>(dst));
      continue;
    }
    for (int64_t p = 0; p < kc / 2 * 2; p += 2) {
      uint32_t* row = dst + p / 2 * kTile;
      const uint16_t* r0 = b + p * rsb + q * csb;
      if (csb == 1) {
        const uint16_t* r1 = r0 + rsb;
        for (int64_t j = 0; j < cols; ++j) row[j] = uint32_t(r0[j]) | uint32_t(r1[j]) << 16;
      } else if (rsb == 1) {
        for (int64_t j = 0; j < cols; ++j) std::memcpy(row + j, r0 + j * csb, 4);
      } else {
        for (int64_t j = 0; j < cols; ++j) row[j] = uint32_t(r0[j * csb]) | uint32_t(r0[j * csb + rsb]) << 16;
      }
    }
    if (kc % 2) {  // the last row pairs with a zero
      uint32_t* row = dst + kc / 2 * kTile;
      const uint16_t* r0 = b + (kc - 1) * rsb + q * csb;
      for (int64_t j = 0; j < cols; ++j) row[j] = r0[j * csb];
    }
  }
}

uint16_t* scratch(std::vector<uint16_t>& buf, size_t n) {
  if (buf.size() < n + 32) buf.resize(n + 32);
  auto addr = reinterpret_cast<uintptr_t>(buf.data());
  return reinterpret_cast<uint16_t*>((addr + 63) & ~uintptr_t(63));
}

// One 32 x 32 block of C from packed panels (gemm_amx.h's contract).
using TileFn = void (*)(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t rsc, bool accumulate);

void gemm_tiles(TileFn tile, int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t rsa, int64_t csa,
                const bfloat16* B, int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate) {
  thread_local std::vector<uint16_t> a_buf, b_buf;
  alignas(64) float block[kTile * kTile];
  for (int64_t jc = 0; jc < N; jc += kNC) {
    const int64_t nc = std::min(kNC, N - jc);
    for (int64_t pc = 0; pc < K; pc += kKC) {
      const int64_t kc = std::min(kKC, K - pc), kcp = round_up(kc, kTile);
      uint16_t* Bp = scratch(b_buf, size_t(round_up(nc, kTile) * kcp));
      pack_b(kc, kcp, nc, B + pc * rsb + jc * csb, rsb, csb, Bp);
      const bool acc = accumulate || pc > 0;  // later K blocks add to what the first wrote
      for (int64_t ic = 0; ic < M; ic += kMC) {
        const int64_t mc = std::min(kMC, M - ic);
        uint16_t* Ap = scratch(a_buf, size_t(round_up(mc, kTile) * kcp));
        pack_a(mc, kc, kcp, A + ic * rsa + pc * csa, rsa, csa, Ap);
        for (int64_t jr = 0; jr < nc; jr += kTile) {
          const int64_t nr = std::min(kTile, nc - jr);
          for (int64_t ir = 0; ir < mc; ir += kTile) {
            const int64_t mr = std::min(kTile, mc - ir);
            float* c = C + (ic + ir) * rsc + (jc + jr) * csc;
            const uint16_t* a_panel = Ap + ir * kcp;
            const uint16_t* b_panel = Bp + jr * kcp;
            if (mr == kTile && nr == kTile && csc == 1) {
              tile(kcp, a_panel, b_panel, c, rsc, acc);
              continue;
            }
            tile(kcp, a_panel, b_panel, block, kTile, false);
            for (int64_t i = 0; i < mr; ++i)
              for (int64_t j = 0; j < nr; ++j) {
                float& dst = c[i * rsc + j * csc];
                dst = acc ? dst + block[i * kTile + j] : block[i * kTile + j];
              }
          }
        }
      }
    }
  }
}

// The rows x cols matrix X (element (r,c) at X[r*rs + c*cs]) widened into `out`, keeping
// whichever of its strides is 1 as the contiguous one (so a transposed operand stays
// transposed, for gemm() to read as such); returns the strides of `out`.
std::pair<int64_t, int64_t> widen_matrix(int64_t rows, int64_t cols, const bfloat16* X, int64_t rs, int64_t cs,
                                         float* out) {
  if (cs == 1) {
    for (int64_t r = 0; r < rows; ++r) detail::bf16_to_float(X + r * rs, out + r * cols, cols);
    return {cols, 1};
  }
  if (rs == 1) {
    for (int64_t c = 0; c < cols; ++c) detail::bf16_to_float(X + c * cs, out + c * rows, rows);
    return {1, rows};
  }
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t c = 0; c < cols; ++c) out[r * cols + c] = X[r * rs + c * cs];
  return {cols, 1};
}

// Widen both operands to float32 and multiply there: exact inputs, float32 sums.
void gemm_portable(int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t rsa, int64_t csa, const bfloat16* B,
                   int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate) {
  // Left uninitialised: every element is written by widen_matrix.
  const std::unique_ptr<float[]> a(new float[size_t(M * K)]), b(new float[size_t(K * N)]);
  const auto [ra, ca] = widen_matrix(M, K, A, rsa, csa, a.get());
  const auto [rb, cb] = widen_matrix(K, N, B, rsb, csb, b.get());
  gemm(M, N, K, a.get(), ra, ca, b.get(), rb, cb, C, rsc, csc, accumulate);
}

Bf16Kernel resolve(Bf16Kernel k) {
  if (k != Bf16Kernel::Auto) return k;
  if (detail::amx_available()) return Bf16Kernel::Amx;
  return detail::dpbf16_outruns_fma() ? Bf16Kernel::Avx512Bf16 : Bf16Kernel::Portable;
}

}  // namespace

bool bf16_kernel_supported(Bf16Kernel kernel) {
  switch (kernel) {
    case Bf16Kernel::Amx: return detail::amx_available();
    case Bf16Kernel::Avx512Bf16: return detail::dpbf16_available();
    default: return true;
  }
}

bool bf16_kernel_outruns_float32() { return resolve(Bf16Kernel::Auto) != Bf16Kernel::Portable; }

std::string bf16_kernel_name(Bf16Kernel kernel) {
  switch (resolve(kernel)) {
    case Bf16Kernel::Amx: return "amx 32x32";
    case Bf16Kernel::Avx512Bf16: return "avx512-bf16 8x32";
    default: return "portable (float32 gemm)";
  }
}

void gemm_bf16(int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t rsa, int64_t csa, const bfloat16* B,
               int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate, Bf16Kernel kernel) {
  ENGINE_REQUIRE(M >= 0 && N >= 0 && K >= 0, "[gemm_bf16] negative size M=", M, " N=", N, " K=", K);
  ENGINE_REQUIRE(bf16_kernel_supported(kernel), "[gemm_bf16] this machine cannot run the ",
                 kernel == Bf16Kernel::Amx ? "AMX kernel (no amx-bf16, or the OS refused the tile state)"
                                           : "AVX-512 BF16 kernel (no avx512bf16)");
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum
    if (!accumulate)
      for (int64_t i = 0; i < M; ++i)
        for (int64_t j = 0; j < N; ++j) C[i * rsc + j * csc] = 0.0f;
    return;
  }
  switch (resolve(kernel)) {
    case Bf16Kernel::Amx:
      detail::amx_configure();
      return gemm_tiles(detail::amx_tile_32x32, M, N, K, A, rsa, csa, B, rsb, csb, C, rsc, csc, accumulate);
    case Bf16Kernel::Avx512Bf16:
      return gemm_tiles(detail::dpbf16_tile_32x32, M, N, K, A, rsa, csa, B, rsb, csb, C, rsc, csc, accumulate);
    default: return gemm_portable(M, N, K, A, rsa, csa, B, rsb, csb, C, rsc, csc, accumulate);
  }
}

}  // namespace engine
