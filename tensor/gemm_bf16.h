// bfloat16 matrix multiply on the CPU: C (float32) = A·B for bfloat16 A and B, every
// product and sum in float32 (the inputs are exact in float32, so only the sums round).
//
//   // C (M,N) = A (M,K) · B (K,N), all row-major; strides as in gemm.h:
//   gemm_bf16(M, N, K, A, K, 1, B, N, 1, C, N, 1, /*accumulate=*/false);
//
// Kernels, chosen once at run time:
//   amx:      Intel AMX tiles (TDPBF16PS: a 16x32 by 32x16 bfloat16 product per
//             instruction, ~1.8 TFLOP/s on one core here, 11x the core's float32 FMA peak).
//             Needs the CPU's amx-bf16 and the kernel's permission (arch_prctl), asked once.
//             Like every AMX product it reads subnormal inputs (below 2^-126) as zero.
//   avx512-bf16: AVX-512's bfloat16 dot product (VDPBF16PS: 16 pairs of products per
//             instruction), where there is no AMX. Worth it only where the core runs it
//             faster than float32 FMAs: on Zen 5 468 GFLOP/s against 256 (one core, measured),
//             so it is picked on AMD's cores. Intel's run it at half the FMA's rate (80-87
//             against 170-175 on a Xeon, family 6 model 207): with AMX hidden (some VMs
//             hide it), the portable path is faster there. Reads subnormal inputs as zero
//             and flushes subnormal results.
//   portable: widen both operands to float32 and run gemm() (same values, float32 speed).
#pragma once

#include <cstdint>
#include <string>

#include "tensor/half.h"

namespace engine {

enum class Bf16Kernel { Auto, Portable, Amx, Avx512Bf16 };

// C[i,j] = (accumulate ? C[i,j] : 0) + sum_k A[i,k] * B[k,j], for i < M, j < N.
// Element (i,j) of X is X[i*rsX + j*csX]. C must not overlap A or B.
void gemm_bf16(int64_t M, int64_t N, int64_t K, const bfloat16* A, int64_t rsa, int64_t csa, const bfloat16* B,
               int64_t rsb, int64_t csb, float* C, int64_t rsc, int64_t csc, bool accumulate,
               Bf16Kernel kernel = Bf16Kernel::Auto);

// Whether this machine can run `kernel`, and the name of the one Auto picks.
bool bf16_kernel_supported(Bf16Kernel kernel);
// Whether Auto picks a kernel of its own (AMX or AVX-512 BF16), faster than float32's.
bool bf16_kernel_outruns_float32();
std::string bf16_kernel_name(Bf16Kernel kernel = Bf16Kernel::Auto);

}  // namespace engine
