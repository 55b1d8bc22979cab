// The AMX micro-kernel of the bfloat16 GEMM (see gemm_amx.h for the layouts).
//
// AMX adds eight tile registers of up to 16 rows x 64 bytes and one instruction that
// multiplies two of them into a third: TDPBF16PS C(16x16 fp32) += A(16x32 bf16) · B(32x16
// bf16), where B is stored as 16 rows of 16 pairs. A 32 x 32 block of C is four C tiles
// (tmm0-3); each step of 32 along k loads two A tiles (rows 0-15, 16-31: tmm4, tmm5) and
// two B tiles (columns 0-15, 16-31: tmm6, tmm7) and issues four products: 4 loads of 1 KiB
// feed 4 x 16,384 flops.
//
// Linux hands out the tile registers' 8 KiB of state only on request
// (arch_prctl(ARCH_REQ_XCOMP_PERM, XFEATURE_XTILEDATA)); amx_available() asks once.
#include "tensor/gemm_amx.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>

#include "tensor/cpu_features.h"

namespace engine::detail {
namespace {

constexpr long kArchReqXcompPerm = 0x1023;
constexpr long kXfeatureXtiledata = 18;

bool cpu_has_amx_bf16() {
  unsigned eax, ebx, ecx, edx;
  if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return false;
  const bool tile = edx & (1u << 24), bf16 = edx & (1u << 22);
  return tile && bf16;
}

// The tile configuration (palette 1): every tile 16 rows of 64 bytes.
struct alignas(64) TileConfig {
  uint8_t palette = 1, start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t bytes_per_row[16] = {};
  uint8_t rows[16] = {};
};

}  // namespace

bool amx_available() {
  static const bool ok =
      cpu_has_avx512() && cpu_has_amx_bf16() && syscall(SYS_arch_prctl, kArchReqXcompPerm, kXfeatureXtiledata) == 0;
  return ok;
}

__attribute__((target("amx-tile"))) void amx_configure() {
  thread_local bool done = false;
  if (done) return;
  TileConfig cfg;
  for (int t = 0; t < 8; ++t) cfg.rows[t] = 16, cfg.bytes_per_row[t] = 64;
  _tile_loadconfig(&cfg);
  done = true;
}

__attribute__((target("amx-tile,amx-bf16"))) void amx_tile_32x32(int64_t kc, const uint16_t* a, const uint16_t* b,
                                                                 float* c, int64_t rsc, bool accumulate) {
  const long c_stride = long(rsc * 4);
  if (accumulate) {
    _tile_loadd(0, c, c_stride);
    _tile_loadd(1, c + 16, c_stride);
    _tile_loadd(2, c + 16 * rsc, c_stride);
    _tile_loadd(3, c + 16 * rsc + 16, c_stride);
  } else {
    _tile_zero(0);
    _tile_zero(1);
    _tile_zero(2);
    _tile_zero(3);
  }
  const long a_stride = long(kc * 2), b_stride = 32 * 2 * 2;  // bytes between tile rows
  for (int64_t k = 0; k < kc; k += 32) {
    _tile_loadd(4, a + k, a_stride);            // rows 0-15, k .. k+31
    _tile_loadd(5, a + 16 * kc + k, a_stride);  // rows 16-31
    _tile_loadd(6, b + k * 32, b_stride);       // pair rows k/2 .. k/2+15, columns 0-15
    _tile_loadd(7, b + k * 32 + 32, b_stride);  // columns 16-31
    _tile_dpbf16ps(0, 4, 6);
    _tile_dpbf16ps(1, 4, 7);
    _tile_dpbf16ps(2, 5, 6);
    _tile_dpbf16ps(3, 5, 7);
  }
  _tile_stored(0, c, c_stride);
  _tile_stored(1, c + 16, c_stride);
  _tile_stored(2, c + 16 * rsc, c_stride);
  _tile_stored(3, c + 16 * rsc + 16, c_stride);
}

}  // namespace engine::detail
