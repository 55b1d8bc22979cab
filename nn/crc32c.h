// CRC32C (Castagnoli), the checksum a checkpoint keeps of its header and of each tensor,
// so that a file changed after it was written (a disk fault, a bad copy) is refused when
// it is loaded instead of training on from silently wrong numbers (as leveldb checks its
// blocks).
//
//   uint32_t c = crc32c(bytes, n);               // the checksum of n bytes
//   c = crc32c(more, m, c);                      // continued over the next m bytes
//   crc32c("123456789", 9) == 0xE3069283         // the standard check value
//
// It uses the CPU's crc32 instruction (SSE4.2) where there is one, chosen at run time, and
// a table otherwise; crc32c_portable() is the table's version, which the tests compare.
#pragma once

#include <cstddef>
#include <cstdint>

namespace engine::nn {

uint32_t crc32c(const void* data, size_t n, uint32_t crc = 0);
uint32_t crc32c_portable(const void* data, size_t n, uint32_t crc = 0);

}  // namespace engine::nn
