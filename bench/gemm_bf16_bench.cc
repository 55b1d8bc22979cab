// bfloat16 GEMM GFLOP/s beside our float32 GEMM, one thread, square sizes and the MLP's
// shapes. Debian's OpenBLAS has no cblas_sbgemm, so the float32 GEMM (itself measured
// beside OpenBLAS in gemm_bench) is the yardstick; the core's float32 FMA peak is printed
// for scale.
//
//   bazel run //bench:gemm_bf16_bench
//
// Both run alternately for several rounds; the table gives each one's median GFLOP/s and
// the median of the per-round ratios. Each shape is first checked: the bfloat16 result
// within 1e-2 (relative norm) of the float32 one.
#include <cmath>
#include <cstdio>
#include <exception>
#include <string>
#include <vector>

#include "bench/fma_peak.h"
#include "bench/median.h"
#include "tensor/gemm.h"
#include "tensor/gemm_bf16.h"
#include "tensor/random.h"
#include "tools/flags/flags.h"

namespace {

struct Shape {
  std::string label;
  int64_t M, N, K;
};

double relative_norm_error(const std::vector<float>& got, const std::vector<float>& want) {
  double d = 0, n = 0;
  for (size_t i = 0; i < got.size(); ++i) d += std::pow(double(got[i]) - want[i], 2), n += double(want[i]) * want[i];
  return std::sqrt(d / n);
}

}  // namespace

int main(int argc, char** argv) try {
  int rounds = 7;
  engine::Flags flags("gemm_bf16_bench", "The bfloat16 GEMM beside our float32 GEMM, one thread.");
  flags.add("--rounds", &rounds, 1, 1000, "rounds (the median is reported)");
  flags.parse_or_exit(argc, argv);
  std::vector<Shape> shapes;
  for (int64_t n : {64, 128, 256, 512, 768, 1024}) shapes.push_back({"square", n, n, n});
  shapes.push_back({"mlp fwd x@W1^T", 64, 256, 784});
  shapes.push_back({"mlp fwd x@W1^T b256", 256, 256, 784});

  std::printf("GEMM, 1 thread: bfloat16 (%s) vs float32 (%s), median of %d alternating rounds\n",
              engine::bf16_kernel_name().c_str(), engine::gemm_kernel_name().c_str(), rounds);
  std::printf("this core's float32 FMA peak (12 chains, no memory): %.1f GF/s\n", fma_peak_gflops());
  if (const double dp = dpbf16_peak_gflops(); dp > 0)
    std::printf("this core's VDPBF16PS peak (the same loop): %.1f GF/s\n", dp);
  std::printf("%-22s %6s %6s %6s %12s %12s %8s %10s\n", "shape", "M", "N", "K", "bf16 GF/s", "fp32 GF/s", "ratio",
              "rel.err");
  engine::Generator g(0);
  for (const Shape& s : shapes) {
    std::vector<float> A(size_t(s.M * s.K)), B(size_t(s.K * s.N)), C(size_t(s.M * s.N)), R(C.size());
    for (float& x : A) x = g.normal();
    for (float& x : B) x = g.normal();
    std::vector<engine::bfloat16> Ah(A.begin(), A.end()), Bh(B.begin(), B.end());
    auto half = [&] {
      engine::gemm_bf16(s.M, s.N, s.K, Ah.data(), s.K, 1, Bh.data(), s.N, 1, C.data(), s.N, 1, false);
    };
    auto full = [&] { engine::gemm(s.M, s.N, s.K, A.data(), s.K, 1, B.data(), s.N, 1, R.data(), s.N, 1, false); };
    half();
    full();
    const double err = relative_norm_error(C, R);
    if (err > 1e-2) {
      std::printf("MISMATCH on %s: relative error %.3g\n", s.label.c_str(), err);
      return 1;
    }
    const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
    std::vector<double> g_half, g_full, ratio;
    for (int r = 0; r < rounds; ++r) {
      const double a = flops / time_call(half, 0.05) / 1e9;
      const double b = flops / time_call(full, 0.05) / 1e9;
      g_half.push_back(a), g_full.push_back(b), ratio.push_back(a / b);
    }
    std::printf("%-22s %6lld %6lld %6lld %12.1f %12.1f %8.2f %10.2e\n", s.label.c_str(), (long long)s.M, (long long)s.N,
                (long long)s.K, median(g_half), median(g_full), median(ratio), err);
    std::printf(
        "{\"bench\":\"gemm_bf16\",\"shape\":\"%s\",\"M\":%lld,\"N\":%lld,\"K\":%lld,\"bf16_gflops\":%.2f,"
        "\"fp32_gflops\":%.2f,\"ratio\":%.3f,\"rel_err\":%.3g}\n",
        s.label.c_str(), (long long)s.M, (long long)s.N, (long long)s.K, median(g_half), median(g_full), median(ratio),
        err);
  }
  return 0;
} catch (const std::exception& e) {  // a failed allocation, say: said, not an abort
  std::fprintf(stderr, "gemm_bf16_bench: %s\n", e.what());
  return 1;
}
