// Single-precision matrix multiply on the CPU: C = A·B, or C += A·B.
//
// Every operand is given by a pointer and two strides (row stride, column stride), so a
// transposed or sliced matrix is read in place:
//
//   // C (M,N) = A (M,K) · B (K,N), all row-major:
//   gemm(M, N, K, A, K, 1, B, N, 1, C, N, 1, /*accumulate=*/false);
//   // the same with A stored transposed, as a (K,M) row-major array At:
//   gemm(M, N, K, At, 1, M, B, N, 1, C, N, 1, false);
//
// gemm() uses the fastest kernel this CPU supports (AVX-512, AVX2+FMA or portable C++),
// chosen once at run time; gemm_reference() is the plain triple loop it is tested against.
// See gemm.cc for how the work is blocked for the caches.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace engine {

enum class GemmKernel { Auto, Scalar, Avx2, Avx512 };

// C[i,j] = (accumulate ? C[i,j] : 0) + sum_k A[i,k] * B[k,j], for i < M, j < N.
// Element (i,j) of X is X[i*rsX + j*csX]. C must not overlap A or B.
void gemm(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B, int64_t rsb,
          int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate, GemmKernel kernel = GemmKernel::Auto);

// A (M, K) packed once, for several products that share it: a convolution's weights,
// multiplied image by image, would otherwise be packed again for every image.
//
//   const PackedA w(M, K, W, K, 1);
//   for (int64_t n = 0; n < N; ++n) gemm(w, L, cols[n], L, 1, out[n], L, 1, false);
//
// The products equal gemm()'s with the same A to the bit (the same blocks and kernel).
class PackedA {
 public:
  PackedA(int64_t M, int64_t K, const float* A, int64_t rsa, int64_t csa, GemmKernel kernel = GemmKernel::Auto);
  PackedA(const PackedA&) = delete;  // it points into its own buffer, which a move keeps
  PackedA& operator=(const PackedA&) = delete;
  PackedA(PackedA&&) = default;
  PackedA& operator=(PackedA&&) = default;
  int64_t rows() const { return M_; }
  int64_t depth() const { return K_; }
  GemmKernel kernel() const { return kernel_; }
  // The packed block of rows [ic, ic + mc) and depths [pc, pc + kc), as gemm() blocks them.
  const float* block(int64_t pc, int64_t ic) const;

 private:
  int64_t M_, K_;
  GemmKernel kernel_;
  std::vector<float> buf_;
  const float* data_;             // buf_ from its first 64-byte boundary
  std::vector<int64_t> offsets_;  // block (pc, ic) at data_ + offsets_[pc / kc * blocks_down + ic / mc]
  int64_t kc_, mc_, blocks_down_;
};

// C = A · B (or C += A · B) with A packed beforehand.
void gemm(const PackedA& A, int64_t N, const float* B, int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc,
          bool accumulate);

// The definition, written as three loops (sums in double); slow, obviously correct.
void gemm_reference(int64_t M, int64_t N, int64_t K, const float* A, int64_t rsa, int64_t csa, const float* B,
                    int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate);

// Whether this CPU can run `kernel`, and the name of what GemmKernel::Auto picks here.
bool gemm_kernel_supported(GemmKernel kernel);
std::string gemm_kernel_name(GemmKernel kernel = GemmKernel::Auto);

}  // namespace engine
