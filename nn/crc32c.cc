#include "nn/crc32c.h"

#include <array>
#include <cstring>

namespace engine::nn {
namespace {

// The polynomial 0x1EDC6F41, bit-reversed (CRC32C shifts bits out of the low end).
constexpr uint32_t kPoly = 0x82F63B78u;

// table[b]: the CRC register after shifting the byte b through it, 8 bits at a time.
std::array<uint32_t, 256> make_table() {
  std::array<uint32_t, 256> t{};
  for (uint32_t b = 0; b < 256; ++b) {
    uint32_t r = b;
    for (int bit = 0; bit < 8; ++bit) r = (r >> 1) ^ (r & 1 ? kPoly : 0);
    t[b] = r;
  }
  return t;
}

#if defined(__x86_64__)
// The same register, advanced 8 bytes per instruction by SSE4.2's crc32 (same polynomial).
__attribute__((target("sse4.2"))) uint32_t crc32c_sse42(const uint8_t* p, size_t n, uint32_t r) {
  uint64_t r64 = r;
  for (; n >= 8; p += 8, n -= 8) {
    uint64_t word;
    std::memcpy(&word, p, 8);
    r64 = __builtin_ia32_crc32di(r64, word);
  }
  r = uint32_t(r64);
  for (; n > 0; ++p, --n) r = __builtin_ia32_crc32qi(r, *p);
  return r;
}
#endif

}  // namespace

// The register starts at ~0 and is inverted at the end; passing the last result back as
// `crc` undoes that inversion, so a checksum can be continued over more bytes.
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc) {
  static const std::array<uint32_t, 256> table = make_table();
  const auto* p = static_cast<const uint8_t*>(data);
  uint32_t r = ~crc;
  for (size_t i = 0; i < n; ++i) r = (r >> 8) ^ table[(r ^ p[i]) & 0xFF];
  return ~r;
}

uint32_t crc32c(const void* data, size_t n, uint32_t crc) {
#if defined(__x86_64__)
  static const bool sse42 = __builtin_cpu_supports("sse4.2");
  if (sse42) return ~crc32c_sse42(static_cast<const uint8_t*>(data), n, ~crc);
#endif
  return crc32c_portable(data, n, crc);
}

}  // namespace engine::nn
