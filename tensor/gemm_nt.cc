// C = A·B^T as dot products (gemm_nt.h): tiles of 4 rows of A x 4 rows of B, 16 AVX-512
// accumulators; per 16 values of k, 8 loads feed 16 fused multiply-adds, as in gemm()'s
// micro-kernel (10 loads, 16 FMAs), with no packing. Each accumulator holds 16 partial
// sums; one tree of blends, shuffles and adds sums the 16 accumulators' lanes together
// (46 instructions for 16 results), a fixed cost per tile that on the CNN's K = 196 is
// about a fifth of the multiply-adds. In the CNN's step that is still less than the two
// transposing copies it replaces, once the rows are aligned (see gemm_nt.h).
//
// Blocking: see gemm_nt_avx512.
#include "tensor/gemm_nt.h"

#include <immintrin.h>

#include <algorithm>

#include "tensor/check.h"
#include "tensor/gemm.h"

namespace engine {

namespace {

constexpr int kRows = 4, kCols = 4;  // A rows x B rows per tile

// The maskz forms with every lane kept: the plain intrinsics start from an undefined
// vector, which GCC 12 reports as possibly uninitialised.
constexpr __mmask16 kAll = 0xFFFF;

// The slot of the 16 accumulators that holds element (i, j) of a tile: reduce_16 leaves
// the sum of slot kSlot[i][j] in lane 4i + j, so each row of the tile is 4 adjacent lanes.
constexpr int kSlot[kRows][kCols] = {{0, 8, 4, 12}, {2, 10, 6, 14}, {1, 9, 5, 13}, {3, 11, 7, 15}};

// The lanes of the 16 accumulators added as gemm_nt.h's tree, all at once. Each level
// pairs two vectors x, y: a blend takes half of each, one shuffle the other halves, and
// one add makes [x's sums | y's sums]; the shuffles (one port) are 15, half of what two
// shuffles per pair would need.
__attribute__((target("avx512f"))) __m512 reduce_16(const __m512 (&v)[16]) {
  __m512 w[8], z[4], s[2];
  for (int p = 0; p < 8; ++p) {  // h_l = v_l + v_{l+8}: [v_2p's 8 | v_2p+1's 8]
    const __m512 x = v[2 * p], y = v[2 * p + 1];
    w[p] = _mm512_add_ps(_mm512_mask_blend_ps(0xFF00, x, y), _mm512_maskz_shuffle_f32x4(kAll, x, y, 0x4E));
  }
  // g_m = h_m + h_{m+4}: 128-bit lane r of z[q] holds the 4 of v_{4q + (0, 2, 1, 3)[r]}.
  const __m512i swap = _mm512_setr_epi32(4, 5, 6, 7, 16, 17, 18, 19, 12, 13, 14, 15, 24, 25, 26, 27);
  for (int q = 0; q < 4; ++q)
    z[q] = _mm512_add_ps(_mm512_mask_blend_ps(0xF0F0, w[2 * q], w[2 * q + 1]),
                         _mm512_permutex2var_ps(w[2 * q], swap, w[2 * q + 1]));
  for (int t = 0; t < 2; ++t)  // u_m = g_m + g_{m+2}: [x's u_0, u_1, y's u_0, u_1] per 128 bits
    s[t] = _mm512_add_ps(_mm512_mask_blend_ps(0xCCCC, z[2 * t], z[2 * t + 1]),
                         _mm512_maskz_shuffle_ps(kAll, z[2 * t], z[2 * t + 1], 0x4E));
  const __m512 odd = _mm512_mask_blend_ps(0xAAAA, s[0], s[1]), even = _mm512_mask_blend_ps(0x5555, s[0], s[1]);
  return _mm512_add_ps(odd, _mm512_maskz_permute_ps(kAll, even, 0xB1));  // u_0 + u_1
}

// One multiply-add step of a 4 x 4 tile over the 16 values of k at `k` (lanes outside
// `m` load 0 and add 0 * 0). acc[kSlot[i][j]] is element (i, j).
__attribute__((target("avx512f"))) inline void step(__m512 (&acc)[16], const float* const (&a)[kRows],
                                                    const float* const (&b)[kCols], int64_t k, __mmask16 m) {
  __m512 av[kRows];
  for (int i = 0; i < kRows; ++i) av[i] = _mm512_maskz_loadu_ps(m, a[i] + k);
  for (int j = 0; j < kCols; ++j) {
    const __m512 bv = _mm512_maskz_loadu_ps(m, b[j] + k);
    for (int i = 0; i < kRows; ++i) acc[kSlot[i][j]] = _mm512_fmadd_ps(av[i], bv, acc[kSlot[i][j]]);
  }
}

// One 4 x 4 tile: rows a[0..3] of A against rows b[0..3] of B over k < K. Lane 4i + j of
// the result is element (i, j), so each row of the tile is 4 adjacent lanes.
__attribute__((target("avx512f"))) __m512 tile(int64_t K, const float* const (&a)[kRows],
                                               const float* const (&b)[kCols]) {
  __m512 acc[16];
  for (__m512& x : acc) x = _mm512_setzero_ps();
  int64_t k = 0;
  for (; k + 16 <= K; k += 16) step(acc, a, b, k, kAll);
  if (k < K) step(acc, a, b, k, __mmask16((1u << (K - k)) - 1));
  return reduce_16(acc);
}

// Adds (or writes) a rows x cols corner of a tile into C: row i is lanes 4i..4i+3, moved
// with a masked load and store at C's row minus 4i (masked-off lanes are never touched).
__attribute__((target("avx512f"))) void store_tile(__m512 t, int64_t rows, int64_t cols, float* C, int64_t ldc,
                                                   bool accumulate) {
  if (ldc < kCols) {  // C's rows too close together for the offset below: one by one
    alignas(64) float sums[16];
    _mm512_store_ps(sums, t);
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j)
        C[i * ldc + j] = accumulate ? C[i * ldc + j] + sums[i * kCols + j] : sums[i * kCols + j];
    return;
  }
  for (int64_t i = 0; i < rows; ++i) {
    const __mmask16 m = __mmask16(((1u << cols) - 1) << (kCols * i));
    float* row = C + i * (ldc - kCols);  // lane 4i + j lands on C[i * ldc + j]
    const __m512 v = accumulate ? _mm512_add_ps(_mm512_maskz_loadu_ps(m, row), t) : t;
    _mm512_mask_storeu_ps(row, m, v);
  }
}

// Pointers to `count` rows from `first`, the last repeated to fill a tile (an edge tile
// computes the copies and drops their results).
template <int n>
void tile_rows(const float* first, int64_t ld, int64_t count, const float* (&rows)[n]) {
  for (int r = 0; r < n; ++r) rows[r] = first + std::min<int64_t>(r, count - 1) * ld;
}

__attribute__((target("avx512f"))) void gemm_nt_avx512(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda,
                                                       const float* B, int64_t ldb, float* C, int64_t ldc,
                                                       bool accumulate) {
  // Blocks of A's and of B's rows of about 12 KB each, and at least two tiles' rows: both
  // stay in L1 while every tile of the pair is made, so each row comes from L2 once per
  // block of the other operand (and is used at least twice once there).
  const int64_t block = std::max<int64_t>(2 * kRows, (12288 / (K * 4)) / kRows * kRows);
  for (int64_t j0 = 0; j0 < N; j0 += block) {
    const int64_t j_end = std::min(N, j0 + block);
    for (int64_t i0 = 0; i0 < M; i0 += block) {
      const int64_t i_end = std::min(M, i0 + block);
      for (int64_t i = i0; i < i_end; i += kRows) {
        const float* a[kRows];
        tile_rows(A + i * lda, lda, std::min<int64_t>(kRows, i_end - i), a);
        for (int64_t j = j0; j < j_end; j += kCols) {
          const float* b[kCols];
          tile_rows(B + j * ldb, ldb, std::min<int64_t>(kCols, j_end - j), b);
          store_tile(tile(K, a, b), std::min<int64_t>(kRows, i_end - i), std::min<int64_t>(kCols, j_end - j),
                     C + i * ldc + j, ldc, accumulate);
        }
      }
    }
  }
}

}  // namespace

bool gemm_nt_has_kernel() { return gemm_kernel_supported(GemmKernel::Avx512); }

void gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
             int64_t ldc, bool accumulate) {
  ENGINE_REQUIRE(M >= 0 && N >= 0 && K >= 0, "[gemm_nt] negative size M=", M, " N=", N, " K=", K);
  if (M == 0 || N == 0) return;
  if (K == 0 || !gemm_nt_has_kernel()) {  // gemm() also knows what an empty sum leaves in C
    gemm(M, N, K, A, lda, 1, B, 1, ldb, C, ldc, 1, accumulate);
    return;
  }
  gemm_nt_avx512(M, N, K, A, lda, B, ldb, C, ldc, accumulate);
}

}  // namespace engine
