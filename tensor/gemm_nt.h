// C = A·B^T where both A and B run along K: every element of C is a dot product of a row
// of A with a row of B, so nothing needs transposing or packing.
//
// This is the shape of a convolution's weight gradient, dW (O, C kh kw) = g (O, L) ·
// cols^T with g and cols both stored (., L): the general gemm() would copy both operands
// through 8x8 transposes into its panels (40% of that product's time in the lessons' CNN).
//
//   // C (M,N) = A (M,K) · B (N,K)^T, rows of A and B contiguous:
//   gemm_nt(M, N, K, A, K, B, K, C, N, /*accumulate=*/false);
//
// The order of the adds (the same on every call, so results are reproducible): element
// (i,j) sums in 16 lanes, lane l taking k = l, l+16, l+32, ... with fused multiply-adds, and
// the lanes are then added as the tree
//   h_l = v_l + v_{l+8};  g_m = h_m + h_{m+4};  u_m = g_m + g_{m+2};  sum = u_0 + u_1.
// With accumulate, C + sum. On CPUs without AVX-512 it is gemm() with the strides of B^T
// (same products, another order of adds).
//
// Speed: rows that start on 64-byte lines, and K a multiple of 16 (pad with zeros), run
// fastest: a vector load across two cache lines costs two, and rows 196 floats apart ran
// at 60% of the speed of the same rows padded to 208 and aligned.
#pragma once

#include <cstdint>

namespace engine {

// C[i*ldc + j] = (accumulate ? C[i*ldc + j] : 0) + sum_k A[i*lda + k] * B[j*ldb + k],
// for i < M, j < N. C must not overlap A or B.
void gemm_nt(int64_t M, int64_t N, int64_t K, const float* A, int64_t lda, const float* B, int64_t ldb, float* C,
             int64_t ldc, bool accumulate);

// Whether gemm_nt runs its own AVX-512 dot-product tiles here (else it calls gemm()).
bool gemm_nt_has_kernel();

}  // namespace engine
