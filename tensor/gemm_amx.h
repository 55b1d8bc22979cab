// Internal to the bfloat16 GEMM: the AMX micro-kernel and the permission it needs.
//
// amx_tile_32x32 computes one 32 x 32 block of C from packed panels:
//   c[i*rsc + j] (+)= sum_{k < kc} a[i*kc + k] * b_pair(k, j)
// where `a` is 32 rows of A, row-major with kc (a multiple of 32) values each, and `b` is
// kc/2 rows of 32 column pairs: b[(p*32 + j)*2 + h] = B[2p + h, j] ("VNNI" order: the two
// values a TDPBF16PS lane multiplies sit side by side).
#pragma once

#include <cstdint>

namespace engine::detail {

// True when the CPU has AMX-BF16 and the OS lets this process use its tile registers.
bool amx_available();
// Loads the tile layout this kernel uses; once per thread before the first tile call.
void amx_configure();
void amx_tile_32x32(int64_t kc, const uint16_t* a, const uint16_t* b, float* c, int64_t rsc, bool accumulate);

}  // namespace engine::detail
