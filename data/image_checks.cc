#include "data/image_checks.h"

#include <algorithm>
#include <cstdlib>

#include "tensor/check.h"

namespace engine::data {

// An uncompressed BMP's size follows from its header: |height| rows of ceil(width x bits /
// 32) x 4 bytes from the pixel offset on. Called once the dimensions are bounded, so the
// products below cannot overflow.
void check_bmp_holds_its_pixels(const std::vector<uint8_t>& b, const std::string& path) {
  if (b.size() < 26 || b[0] != 'B' || b[1] != 'M') return;
  auto u16 = [&](size_t at) { return uint32_t(b[at]) | uint32_t(b[at + 1]) << 8; };
  auto u32 = [&](size_t at) { return u16(at) | u16(at + 2) << 16; };
  int64_t w = 0, h = 0, bits = 0, compression = 0;
  if (u32(14) == 12) {  // the OS/2 core header: 16-bit sizes
    w = u16(18), h = u16(20), bits = u16(24);
  } else {
    if (b.size() < 34) return;
    w = int32_t(u32(18)), h = int32_t(u32(22)), bits = u16(28), compression = u32(30);
  }
  // Run-length coded pixels have no fixed size (and stb refuses them anyway).
  if ((compression != 0 && compression != 3) || bits < 1 || bits > 32) return;
  const int64_t row = (std::abs(w) * bits + 31) / 32 * 4, offset = u32(10);
  const int64_t need = offset + row * std::abs(h);
  ENGINE_REQUIRE(need <= int64_t(b.size()), "[load_image] ", path, " is cut short: its BMP header declares ",
                 std::abs(w), "x", std::abs(h), " pixels of ", bits, " bits from byte ", offset, ", ", need,
                 " bytes in all, but the file holds ", b.size(), " (a copy or download that did not finish?)");
}

namespace {
// One DHT segment's tables, read as stb reads them: a class-and-slot byte, 16 code counts
// (codes of 1 to 16 bits), then that many symbol bytes; the next table follows, until the
// segment's length is used up. stb fills size[k] for every code before it checks anything
// else, and then reads the symbols into values[256]: more than 256 codes write past both.
void check_dht(const std::vector<uint8_t>& b, size_t at, int64_t left, const std::string& path) {
  auto byte = [&](size_t i) { return i < b.size() ? b[i] : 0; };  // stb reads 0 past the end
  while (left > 0) {
    int64_t codes = 0;
    for (size_t i = 1; i <= 16; ++i) codes += byte(at + i);
    ENGINE_REQUIRE(codes <= 256, "[load_image] ", path, " is a corrupt JPEG: a Huffman table at byte ", at,
                   " declares ", codes, " codes, where a table holds at most 256 (one per byte value)");
    at += size_t(17 + codes), left -= 17 + codes;
  }
}
}  // namespace

void check_jpeg_huffman_tables(const std::vector<uint8_t>& b, const std::string& path) {
  // A JPEG starts with the start-of-image marker, which stb takes after 0xFF fill bytes too.
  size_t at = 0;
  while (at < b.size() && b[at] == 0xFF) ++at;
  if (at == 0 || at >= b.size() || b[at] != 0xD8) return;  // not a JPEG
  // stb reads a marker as 0xFF, any 0xFF fill bytes, then its code, and steps over any other
  // byte between segments one at a time (entropy-coded data included: there a 0xFF is
  // followed by 0 or a restart marker). Segments other than those have a 2-byte length,
  // which counts itself; stb skips or reads exactly that much, or stops with an error.
  for (++at; at < b.size();) {
    if (b[at] != 0xFF) {
      ++at;
      continue;
    }
    while (at < b.size() && b[at] == 0xFF) ++at;
    if (at + 2 >= b.size()) return;
    const uint8_t marker = b[at++];
    if (marker == 0xD9) return;  // end of image: stb reads no further
    if (marker == 0x00 || marker == 0x01 || (marker >= 0xD0 && marker <= 0xD8)) continue;  // no length
    const size_t length = size_t(b[at]) << 8 | b[at + 1];
    if (marker == 0xC4) check_dht(b, at + 2, int64_t(length) - 2, path);
    at += std::max<size_t>(length, 2);
  }
}

}  // namespace engine::data
