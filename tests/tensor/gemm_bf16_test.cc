// The bfloat16 GEMM against the definition: every kernel this machine runs, shapes with
// ragged edges (not multiples of the 32 x 32 tile), K over one cache block, transposed and
// padded operands, accumulation; and matmul on bfloat16 tensors against float32.
#include <cmath>
#include <string>
#include <vector>

#include "catch2/catch.hpp"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/ops.h"

using namespace engine;

namespace {

struct Case {
  int64_t M, N, K;
  bool trans_a, trans_b, accumulate;
  int64_t pad = 3;   // leading-dimension padding; an even one lets a transposed B be packed as 32-bit words
  int64_t step = 1;  // 2: every other element, so that neither stride of A or B is 1
};

void check_case(const Case& c, Bf16Kernel kernel, Generator& g) {
  const int64_t pad = c.pad;
  const int64_t lda = (c.trans_a ? c.M : c.K) + pad, ldb = (c.trans_b ? c.K : c.N) + pad, ldc = c.N + pad;
  std::vector<bfloat16> A(size_t((c.trans_a ? c.K : c.M) * lda * c.step)),
      B(size_t((c.trans_b ? c.N : c.K) * ldb * c.step));
  std::vector<float> Af(A.size()), Bf(B.size());
  for (size_t i = 0; i < A.size(); ++i) Af[i] = A[i] = g.normal();  // Af holds the rounded value
  for (size_t i = 0; i < B.size(); ++i) Bf[i] = B[i] = g.normal();
  const int64_t rsa = (c.trans_a ? 1 : lda) * c.step, csa = (c.trans_a ? lda : 1) * c.step;
  const int64_t rsb = (c.trans_b ? 1 : ldb) * c.step, csb = (c.trans_b ? ldb : 1) * c.step;
  std::vector<float> C(size_t(c.M * ldc)), R;
  for (float& x : C) x = g.normal();
  R = C;
  gemm_bf16(c.M, c.N, c.K, A.data(), rsa, csa, B.data(), rsb, csb, C.data(), ldc, 1, c.accumulate, kernel);
  // The definition on the same (bfloat16) inputs, summed in double.
  gemm_reference(c.M, c.N, c.K, Af.data(), rsa, csa, Bf.data(), rsb, csb, R.data(), ldc, 1, c.accumulate);
  const double tol = 1e-5 * (std::sqrt(double(c.K)) + 1) * 4;  // float32 sums of K products
  for (int64_t i = 0; i < c.M; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      INFO(bf16_kernel_name(kernel) << " M=" << c.M << " N=" << c.N << " K=" << c.K << " ta=" << c.trans_a << " tb="
                                    << c.trans_b << " acc=" << c.accumulate << " at (" << i << "," << j << ")");
      REQUIRE(std::fabs(C[size_t(i * ldc + j)] - R[size_t(i * ldc + j)]) <=
              tol * (1 + std::fabs(R[size_t(i * ldc + j)])));
    }
}

std::vector<Bf16Kernel> kernels_here() {
  std::vector<Bf16Kernel> ks{Bf16Kernel::Portable};
  if (bf16_kernel_supported(Bf16Kernel::Amx))
    ks.push_back(Bf16Kernel::Amx);
  else
    WARN("SKIPPED: the AMX bfloat16 kernel (this CPU has no amx-bf16, or the OS refused the tile state)");
  if (bf16_kernel_supported(Bf16Kernel::Avx512Bf16))
    ks.push_back(Bf16Kernel::Avx512Bf16);
  else
    WARN("SKIPPED: the AVX-512 BF16 kernel (this CPU has no avx512bf16)");
  return ks;
}

}  // namespace

TEST_CASE("gemm_bf16 matches the definition on edge shapes") {
  Generator g(3);
  for (Bf16Kernel k : kernels_here())
    for (int64_t M : {1, 5, 32, 33, 130})
      for (int64_t N : {1, 31, 32, 70})
        for (int64_t K : {1, 2, 31, 33, 64})
          for (bool ta : {false, true})
            for (int64_t pad : {2, 3}) check_case({M, N, K, ta, !ta, K % 2 == 1, pad}, k, g);
}

TEST_CASE("gemm_bf16 over several cache blocks of K, M and N") {
  Generator g(4);
  for (Bf16Kernel k : kernels_here()) {
    check_case({256, 1100, 1030, false, false, false}, k, g);  // K over KC = 512, N over NC = 1024
    check_case({200, 96, 600, true, true, true}, k, g);
    check_case({64, 256, 784, false, true, false, 0}, k, g);   // the MLP's first layer, as linear calls it
    check_case({70, 40, 90, false, false, true, 3, 2}, k, g);  // no unit stride in A or B
    check_case({33, 65, 47, true, true, false, 2, 2}, k, g);
  }
}

TEST_CASE("gemm_bf16 picks a kernel of its own only where it outruns the float32 GEMM") {
  // AMX where the OS grants it; else VDPBF16PS on AMD's cores, which run it at twice the
  // FMA's multiply-adds; else (Intel's cores run it at half that rate) the float32 GEMM.
  const bool amx = bf16_kernel_supported(Bf16Kernel::Amx);
  const bool dpbf16 = bf16_kernel_supported(Bf16Kernel::Avx512Bf16) && __builtin_cpu_is("amd");
  const std::string want = amx ? "amx 32x32" : dpbf16 ? "avx512-bf16 8x32" : "portable (float32 gemm)";
  INFO("this CPU: amx " << amx << ", avx512bf16 " << bf16_kernel_supported(Bf16Kernel::Avx512Bf16));
  REQUIRE(bf16_kernel_name() == want);
  REQUIRE(bf16_kernel_outruns_float32() == (amx || dpbf16));
}

TEST_CASE("bfloat16 matmul: within 1e-2 (relative norm) of float32, and exactly the GEMM's sums rounded once") {
  Generator g(5);
  Tensor a = randn({2, 64, 256}, &g), b = randn({256, 96}, &g);
  Tensor exact = matmul(a, b);
  Tensor got = matmul(a.to(DType::BFloat16), b.to(DType::BFloat16));
  REQUIRE(got.dtype() == DType::BFloat16);
  REQUIRE(got.shape() == Shape{2, 64, 96});
  // Relative error of the whole result, ||got - exact|| / ||exact||: rounding inputs and
  // output to 8 significant bits perturbs each value by about 2^-9.
  const auto e = exact.to_vector<float>(), o = got.to(DType::Float32).to_vector<float>();
  double diff = 0, norm = 0;
  for (size_t i = 0; i < e.size(); ++i) diff += std::pow(double(o[i]) - e[i], 2), norm += double(e[i]) * e[i];
  REQUIRE(std::sqrt(diff / norm) < 1e-2);
  // The same product on float32 copies of the rounded inputs, rounded once, agrees to the
  // last bit but for float32 summation order (at most one bfloat16 step).
  Tensor again = matmul(a.to(DType::BFloat16).to(DType::Float32), b.to(DType::BFloat16).to(DType::Float32));
  const auto r = again.to(DType::BFloat16).to(DType::Float32).to_vector<float>();
  for (size_t i = 0; i < r.size(); ++i) REQUIRE(std::fabs(o[i] - r[i]) <= std::fabs(r[i]) * 0x1p-7f + 1e-6f);
  // float16 is widened (no CPU kernel): equal to float32 on the rounded inputs, rounded.
  Tensor h = matmul(a.to(DType::Float16), b.to(DType::Float16));
  REQUIRE(h.dtype() == DType::Float16);
}

TEST_CASE("16-bit matmul into a float32 output: the float32 sums, not rounded to 16 bits") {
  Generator g(6);
  const Tensor a = randn({48, 200}, &g), b = randn({200, 40}, &g);
  for (DType h : {DType::BFloat16, DType::Float16}) {
    const Tensor a16 = a.to(h), b16 = b.to(h);
    // The reference: float32 copies of the rounded operands, multiplied in float32.
    const auto want = matmul(a16.to(DType::Float32), b16.to(DType::Float32)).to_vector<float>();
    Tensor into = full({48, 40}, 7.0);  // overwritten, not added to
    const Tensor got = matmul(a16.transpose(0, 1).transpose(0, 1), b16, into);
    REQUIRE(got.dtype() == DType::Float32);
    REQUIRE(got.data<float>() == into.data<float>());
    const auto o = got.to_vector<float>();
    // Equal but for float32 summation order: far inside one 16-bit step, so a result
    // rounded to 16 bits would fail here on most elements.
    int rounded_would_differ = 0;
    for (size_t i = 0; i < o.size(); ++i) {
      REQUIRE(std::fabs(o[i] - want[i]) <= std::fabs(want[i]) * 1e-5f + 1e-5f);
      const float r = h == DType::BFloat16 ? float(bfloat16(want[i])) : float(float16(want[i]));
      rounded_would_differ += std::fabs(r - want[i]) > std::fabs(want[i]) * 1e-5f + 1e-5f;
    }
    REQUIRE(rounded_would_differ > int(o.size()) / 2);
  }
  // Only float32 outputs: a 16-bit one is refused by name.
  Tensor wrong = empty({48, 40}, DType::BFloat16);
  REQUIRE_THROWS_WITH(matmul(a.to(DType::BFloat16), b.to(DType::BFloat16), wrong),
                      Catch::Contains("contiguous float32 tensor of shape (48,40) on cpu, got (48,40) bfloat16"));
}
