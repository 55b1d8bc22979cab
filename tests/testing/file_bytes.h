// A file's bytes, read and written whole, and a safetensors file built by hand: for the
// tests that damage checkpoints on purpose.
//
//   std::string f = engine::testing::read_bytes(path);
//   f[f.size() - 1] ^= 1;                                   // one bit of the last tensor
//   engine::testing::write_bytes(path, f);
//   write_bytes(path, safetensors_file(R"({"w":{...}})", data));  // header + data
#pragma once

#include <cstdint>
#include <fstream>
#include <iterator>
#include <string>

namespace engine::testing {

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary) << bytes;
}

// The 8-byte little-endian header length, the header JSON, then the data section.
inline std::string safetensors_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  for (int i = 0; i < 8; ++i) out[i] = char((uint64_t(header.size()) >> (8 * i)) & 0xFF);
  return out + header + data;
}

}  // namespace engine::testing
