// A 64-bit hash of raw bytes, chained from `h`: a multiply-xorshift mix, eight bytes at a
// time, then the tail with the length. Not a cryptographic hash: it tells apart copies that
// differ by accident (a dataset's files, a program's build). Used by same_data.h (tensors)
// and same_program.h (the executable, a chunk at a time).
//
//   uint64_t h = engine::dist::hash_bytes(buf, n, 0);
//   h = engine::dist::hash_bytes(more, m, h);  // chained over a second piece
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

namespace engine::dist {

inline uint64_t hash_bytes(const void* data, size_t n, uint64_t h) {
  const char* b = static_cast<const char*>(data);
  auto mix = [&h](uint64_t w) {
    h ^= w;
    h *= 0xff51afd7ed558ccdull;
    h ^= h >> 33;
  };
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, b + i, 8);
    mix(w);
  }
  uint64_t tail = 0;
  if (i < n) std::memcpy(&tail, b + i, n - i);
  mix(tail ^ (uint64_t(n) << 56));
  return h;
}

}  // namespace engine::dist
