// gemm_nt (C = A·B^T as dot products) against the triple-loop reference, and, where its
// AVX-512 tiles run, bit for bit against the order of adds gemm_nt.h documents: 16 lanes of
// fused multiply-adds, then the lanes as a fixed tree.
#include "tensor/gemm_nt.h"

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/gemm.h"
#include "tensor/random.h"

using namespace engine;

namespace {

struct Case {
  int64_t M, N, K, pad;  // pad: extra floats at the end of each row of A, B and C
  bool accumulate;
};

struct Operands {
  int64_t lda, ldb, ldc;
  std::vector<float> A, B, C;
};

Operands random_operands(const Case& c, Generator& g) {
  Operands o{c.K + c.pad, c.K + c.pad, c.N + c.pad, {}, {}, {}};
  o.A.resize(static_cast<size_t>(c.M * o.lda + 1));
  o.B.resize(static_cast<size_t>(c.N * o.ldb + 1));
  o.C.resize(static_cast<size_t>(c.M * o.ldc + 1));
  for (auto* v : {&o.A, &o.B, &o.C})
    for (float& x : *v) x = float(g.normal());
  return o;
}

// The documented order of one element's adds, written out with scalars.
float documented_dot(const float* a, const float* b, int64_t K) {
  float v[16] = {};
  for (int64_t k0 = 0; k0 < K; k0 += 16)
    for (int64_t l = 0; l < 16; ++l) {
      const bool in = k0 + l < K;  // past K a lane adds 0 * 0
      v[l] = std::fma(in ? a[k0 + l] : 0.0f, in ? b[k0 + l] : 0.0f, v[l]);
    }
  float h[8], g[4];
  for (int l = 0; l < 8; ++l) h[l] = v[l] + v[l + 8];
  for (int m = 0; m < 4; ++m) g[m] = h[m] + h[m + 4];
  return (g[0] + g[2]) + (g[1] + g[3]);
}

}  // namespace

TEST_CASE("gemm_nt matches the reference, and its documented order bit for bit, on edge shapes") {
  Generator g(7);
  const std::vector<Case> cases = {
      {1, 1, 1, 0, false},   {3, 5, 15, 1, true},   {4, 4, 16, 0, false},   {5, 9, 17, 3, true},
      {7, 33, 31, 0, false}, {32, 9, 784, 0, true}, {64, 37, 196, 2, true}, {13, 70, 33, 5, false},
      {9, 1, 100, 0, true},  {1, 40, 7, 0, false},
  };
  for (const Case& c : cases) {
    Operands o = random_operands(c, g);
    std::vector<float> R = o.C, before = o.C;
    gemm_nt(c.M, c.N, c.K, o.A.data(), o.lda, o.B.data(), o.ldb, o.C.data(), o.ldc, c.accumulate);
    gemm_reference(c.M, c.N, c.K, o.A.data(), o.lda, 1, o.B.data(), 1, o.ldb, R.data(), o.ldc, 1, c.accumulate);
    const double tol = 4e-5 * (std::sqrt(double(c.K)) + 1);
    for (int64_t i = 0; i < c.M; ++i)
      for (int64_t j = 0; j < o.ldc; ++j) {
        INFO("M=" << c.M << " N=" << c.N << " K=" << c.K << " accumulate=" << c.accumulate << " at (" << i << "," << j
                  << ")");
        const size_t at = static_cast<size_t>(i * o.ldc + j);
        if (j >= c.N) {  // the padding of C's rows is never written
          REQUIRE(o.C[at] == before[at]);
          continue;
        }
        REQUIRE(std::fabs(o.C[at] - R[at]) <= tol * (1 + std::fabs(R[at])));
        if (gemm_nt_has_kernel()) {
          const float dot =
              documented_dot(&o.A[static_cast<size_t>(i * o.lda)], &o.B[static_cast<size_t>(j * o.ldb)], c.K);
          REQUIRE(o.C[at] == (c.accumulate ? before[at] + dot : dot));
        }
      }
    REQUIRE(o.C.back() == before.back());  // nothing written past the last row
  }
  if (!gemm_nt_has_kernel()) WARN("gemm_nt's AVX-512 tiles skipped: this CPU has no AVX-512 (it ran gemm())");
}

TEST_CASE("gemm_nt: an empty sum, and NaN and Inf reach only their own row and column") {
  std::vector<float> C = {5, -0.0f, 7, 8};
  gemm_nt(2, 2, 0, nullptr, 0, nullptr, 0, C.data(), 2, /*accumulate=*/true);
  REQUIRE(C == std::vector<float>{5, -0.0f, 7, 8});
  gemm_nt(2, 2, 0, nullptr, 0, nullptr, 0, C.data(), 2, false);
  REQUIRE(C == std::vector<float>{0, 0, 0, 0});

  const int64_t M = 6, N = 5, K = 20;
  std::vector<float> A(static_cast<size_t>(M * K), 1.0f), B(static_cast<size_t>(N * K), 2.0f);
  A[2 * K + 19] = std::numeric_limits<float>::quiet_NaN();  // row 2, in the partial last 16
  B[3 * K + 0] = std::numeric_limits<float>::infinity();    // row 3 of B: column 3 of C
  std::vector<float> out(static_cast<size_t>(M * N));
  gemm_nt(M, N, K, A.data(), K, B.data(), K, out.data(), N, false);
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      INFO("(" << i << "," << j << ") = " << out[static_cast<size_t>(i * N + j)]);
      const float v = out[static_cast<size_t>(i * N + j)];
      if (i == 2)
        REQUIRE(std::isnan(v));
      else if (j == 3)
        REQUIRE(v == std::numeric_limits<float>::infinity());
      else
        REQUIRE(v == 40.0f);
    }
}
