// Our GEMM against the triple-loop reference: every kernel this CPU supports, on random
// shapes including 1, odd and prime sizes, with transposed and strided operands.
#include <cmath>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/gemm.h"
#include "tensor/random.h"

using namespace engine;

namespace {

struct Case {
  int64_t M, N, K;
  bool trans_a, trans_b, accumulate;
  int64_t pad;  // extra leading-dimension padding, so rows are not packed tight
};

// Runs one case with `kernel` and compares with gemm_reference elementwise.
void check_case(const Case& c, GemmKernel kernel, Generator& g) {
  // Store A as (M,K) or, transposed, as (K,M); likewise B; with padded leading dims.
  const int64_t lda = (c.trans_a ? c.M : c.K) + c.pad, ldb = (c.trans_b ? c.K : c.N) + c.pad;
  std::vector<float> A((c.trans_a ? c.K : c.M) * lda + 1), B((c.trans_b ? c.N : c.K) * ldb + 1);
  for (float& x : A) x = g.normal();
  for (float& x : B) x = g.normal();
  const int64_t rsa = c.trans_a ? 1 : lda, csa = c.trans_a ? lda : 1;
  const int64_t rsb = c.trans_b ? 1 : ldb, csb = c.trans_b ? ldb : 1;
  const int64_t ldc = c.N + c.pad;
  std::vector<float> C(c.M * ldc + 1), R;
  for (float& x : C) x = g.normal();
  R = C;
  gemm(c.M, c.N, c.K, A.data(), rsa, csa, B.data(), rsb, csb, C.data(), ldc, 1, c.accumulate, kernel);
  gemm_reference(c.M, c.N, c.K, A.data(), rsa, csa, B.data(), rsb, csb, R.data(), ldc, 1, c.accumulate);
  // float32 sums of K products of unit normals: error grows like sqrt(K) * eps.
  const double tol = 1e-5 * (std::sqrt(double(c.K)) + 1) * 4;
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      INFO("kernel " << gemm_kernel_name(kernel) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.trans_a
                     << " tb=" << c.trans_b << " acc=" << c.accumulate << " at (" << i << "," << j << ")");
      REQUIRE(std::fabs(C[i * ldc + j] - R[i * ldc + j]) <= tol * (1 + std::fabs(R[i * ldc + j])));
    }
}

std::vector<GemmKernel> kernels_here() {
  std::vector<GemmKernel> ks;
  for (GemmKernel k : {GemmKernel::Scalar, GemmKernel::Avx2, GemmKernel::Avx512})
    if (gemm_kernel_supported(k))
      ks.push_back(k);
    else
      WARN("GEMM kernel " << gemm_kernel_name(k) << " skipped: this CPU does not support it");
  return ks;
}

}  // namespace

TEST_CASE("gemm matches the reference on small and edge shapes") {
  Generator g(1);
  for (GemmKernel k : kernels_here())
    for (int64_t M : {1, 2, 7, 13})
      for (int64_t N : {1, 3, 17, 33})
        for (int64_t K : {0, 1, 5, 31})
          for (int t = 0; t < 4; ++t) check_case({M, N, K, bool(t & 1), bool(t & 2), (M + N) % 2 == 0, M % 3}, k, g);
}

TEST_CASE("gemm matches the reference across block boundaries") {
  Generator g(2);
  // Sizes straddle MR, NR, MC, KC and NC of every kernel (prime sizes included).
  const std::vector<Case> cases = {
      {97, 101, 257, false, false, false, 0},  {131, 67, 263, true, false, true, 1},
      {61, 131, 311, false, true, false, 3},   {29, 4099, 19, true, true, true, 0},
      {256, 256, 256, false, false, false, 0}, {64, 256, 784, false, true, false, 0},
  };
  for (GemmKernel k : kernels_here())
    for (const Case& c : cases) check_case(c, k, g);
}

TEST_CASE("gemm with a strided C and empty sizes") {
  Generator g(3);
  // C written column-major (csc != 1) goes through the edge path; at 40 columns the first
  // 32 come from B read in place.
  for (const int64_t n : {5, 40}) {
    std::vector<float> A(6 * 4), B(static_cast<size_t>(4 * n)), C(static_cast<size_t>(6 * n), 7.0f), R = C;
    for (float& x : A) x = g.normal();
    for (float& x : B) x = g.normal();
    gemm(6, n, 4, A.data(), 4, 1, B.data(), n, 1, C.data(), 1, 6, true);
    gemm_reference(6, n, 4, A.data(), 4, 1, B.data(), n, 1, R.data(), 1, 6, true);
    for (size_t i = 0; i < C.size(); ++i) REQUIRE(C[i] == Approx(R[i]).epsilon(1e-5));
  }
  std::vector<float> A(6 * 4), B(4 * 5), C(6 * 5, 7.0f);
  // K = 0: C becomes 0 (or stays, when accumulating); M = 0 or N = 0 touch nothing.
  gemm(6, 5, 0, A.data(), 4, 1, B.data(), 5, 1, C.data(), 5, 1, false);
  for (float x : C) REQUIRE(x == 0.0f);
  C.assign(C.size(), 3.0f);
  gemm(6, 5, 0, A.data(), 4, 1, B.data(), 5, 1, C.data(), 5, 1, true);
  gemm(0, 5, 4, A.data(), 4, 1, B.data(), 5, 1, C.data(), 5, 1, false);
  for (float x : C) REQUIRE(x == 3.0f);
}

TEST_CASE("gemm with A packed once equals gemm packing it each time, bit for bit") {
  Generator g(4);
  // Several K blocks and M blocks for every kernel, A as stored and transposed, C
  // overwritten and accumulated, each PackedA used for two products.
  const std::vector<Case> cases = {{97, 101, 257, false, false, false, 0},
                                   {131, 67, 263, true, false, true, 1},
                                   {64, 196, 288, false, false, false, 0},
                                   {288, 196, 64, true, false, false, 0},
                                   {5, 3, 0, false, false, true, 0}};
  for (GemmKernel k : kernels_here())
    for (const Case& c : cases) {
      INFO("kernel " << gemm_kernel_name(k) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.trans_a);
      const int64_t lda = (c.trans_a ? c.M : c.K) + c.pad;
      std::vector<float> A(size_t((c.trans_a ? c.K : c.M) * lda + 1));
      for (float& x : A) x = g.normal();
      const int64_t rsa = c.trans_a ? 1 : lda, csa = c.trans_a ? lda : 1;
      const PackedA packed(c.M, c.K, A.data(), rsa, csa, k);
      for (int round = 0; round < 2; ++round) {
        std::vector<float> B(size_t(c.K * c.N + 1)), C(size_t(c.M * c.N + 1));
        for (float& x : B) x = g.normal();
        for (float& x : C) x = g.normal();
        std::vector<float> R = C;
        gemm(packed, c.N, B.data(), c.N, 1, C.data(), c.N, 1, c.accumulate);
        gemm(c.M, c.N, c.K, A.data(), rsa, csa, B.data(), c.N, 1, R.data(), c.N, 1, c.accumulate, k);
        REQUIRE(C == R);
      }
    }
}

TEST_CASE("gemm rejects negative sizes") {
  float x = 0;
  REQUIRE_THROWS_WITH(gemm(-1, 1, 1, &x, 1, 1, &x, 1, 1, &x, 1, 1, false), Catch::Contains("[gemm] negative size"));
}
