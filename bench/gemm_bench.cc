// GEMM GFLOP/s: our gemm() against OpenBLAS cblas_sgemm, one thread each, side by side.
//
//   env -u OPENBLAS_CORETYPE -u OPENBLAS_L2_SIZE $(/usr/bin/python3 bench/peer.py) bazel run //bench:gemm_bench
//   (bench/peer.py names the best OpenBLAS kernel the CPU allows where OpenBLAS would pick less)
//
// For each shape the two run alternately (ours, OpenBLAS, ours, ...) for several rounds;
// the table reports each one's median GFLOP/s and the median of the per-round ratios, which
// is robust to the machine's background noise. A GEMM of M x K by K x N is 2*M*N*K flops.
// Each shape is also checked: both results must agree to float rounding.
#include <cblas.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/median.h"
#include "tensor/gemm.h"
#include "tensor/random.h"
#include "tools/flags/flags.h"

extern "C" void openblas_set_num_threads(int);
extern "C" char* openblas_get_corename(void);

namespace {

struct Shape {
  std::string label;
  int64_t M, N, K;
  bool trans_a, trans_b;
};

}  // namespace

int main(int argc, char** argv) try {
  int rounds = 7;
  engine::Flags flags("gemm_bench", "Our GEMM beside OpenBLAS's cblas_sgemm, one thread, on the MLP's shapes.");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.parse_or_exit(argc, argv);
  openblas_set_num_threads(1);
  std::vector<Shape> shapes;
  for (int64_t n : {64, 128, 256, 384, 512, 768, 1024}) shapes.push_back({"square", n, n, n, false, false});
  // The MLP 784-256-256-10 at batch 64, as its Linear layers call matmul (y = x W^T):
  shapes.push_back({"mlp fwd x@W1^T", 64, 256, 784, false, true});
  shapes.push_back({"mlp fwd h@W2^T", 64, 256, 256, false, true});
  shapes.push_back({"mlp bwd dW1=dY^T@x", 256, 784, 64, true, false});
  shapes.push_back({"mlp bwd dX=dY@W2", 64, 256, 256, false, false});
  // ... and at batch 256, where the GEMMs are most of the step.
  shapes.push_back({"b256 fwd x@W1^T", 256, 256, 784, false, true});
  shapes.push_back({"b256 fwd h@W2^T", 256, 256, 256, false, true});
  shapes.push_back({"b256 bwd dW1=dY^T@x", 256, 784, 256, true, false});
  shapes.push_back({"b256 bwd dW2=dY^T@h", 256, 256, 256, true, false});
  shapes.push_back({"b256 bwd dX=dY@W2", 256, 256, 256, false, false});

  std::printf("GEMM, 1 thread, ours (%s) vs OpenBLAS (%s), median of %d alternating rounds\n",
              engine::gemm_kernel_name().c_str(), openblas_get_corename(), rounds);
  std::printf("this core's float32 FMA peak (12 chains, no memory): %.1f GF/s\n", fma_peak_gflops());
  std::printf("%-22s %6s %6s %6s %12s %12s %8s\n", "shape", "M", "N", "K", "ours GF/s", "blas GF/s", "ratio");
  engine::Generator g(0);
  for (const Shape& s : shapes) {
    const int64_t lda = s.trans_a ? s.M : s.K, ldb = s.trans_b ? s.K : s.N;
    std::vector<float> A(s.M * s.K), B(s.K * s.N), C(s.M * s.N), R(s.M * s.N);
    for (float& x : A) x = g.normal();
    for (float& x : B) x = g.normal();
    const int64_t rsa = s.trans_a ? 1 : lda, csa = s.trans_a ? lda : 1;
    const int64_t rsb = s.trans_b ? 1 : ldb, csb = s.trans_b ? ldb : 1;
    auto ours = [&] { engine::gemm(s.M, s.N, s.K, A.data(), rsa, csa, B.data(), rsb, csb, C.data(), s.N, 1, false); };
    auto blas = [&] {
      cblas_sgemm(CblasRowMajor, s.trans_a ? CblasTrans : CblasNoTrans, s.trans_b ? CblasTrans : CblasNoTrans, int(s.M),
                  int(s.N), int(s.K), 1.0f, A.data(), int(lda), B.data(), int(ldb), 0.0f, R.data(), int(s.N));
    };
    ours();
    blas();
    double worst = 0;
    for (size_t i = 0; i < C.size(); ++i)
      worst = std::max(worst, double(std::fabs(C[i] - R[i])) / (1 + std::fabs(R[i])));
    if (worst > 1e-3) {
      std::printf("MISMATCH on %s: max relative difference %.3g\n", s.label.c_str(), worst);
      return 1;
    }
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
    std::vector<double> g_ours, g_blas, ratio;
    for (int r = 0; r < rounds; ++r) {
      const double a = flops / time_call(ours, 0.05) / 1e9;
      const double b = flops / time_call(blas, 0.05) / 1e9;
      g_ours.push_back(a), g_blas.push_back(b), ratio.push_back(a / b);
    }
    std::printf("%-22s %6lld %6lld %6lld %12.1f %12.1f %8.2f\n", s.label.c_str(), (long long)s.M, (long long)s.N,
                (long long)s.K, median(g_ours), median(g_blas), median(ratio));
    std::printf(
        "{\"bench\":\"gemm\",\"shape\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"ours_gflops\":%.2f,"
        "\"openblas_gflops\":%.2f,\"ratio\":%.3f}\n",
        s.label.c_str(), (long long)s.M, (long long)s.N, (long long)s.K, median(g_ours), median(g_blas), median(ratio));
  }
  return 0;
} catch (const std::exception& e) {  // a failed allocation, say: said, not an abort
  std::fprintf(stderr, "gemm_bench: %s\n", e.what());
  return 1;
}
