// Which build of its program a rank runs (same_program.h).
#include "dist/same_program.h"

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <vector>

#include "dist/hash_bytes.h"

namespace engine::dist {

namespace {
std::string compute() {
  std::ifstream in("/proc/self/exe", std::ios::binary);
  if (!in) return "";
  uint64_t h = 0, size = 0;
  std::vector<char> buf(1 << 20);
  while (in) {
    in.read(buf.data(), std::streamsize(buf.size()));
    const size_t n = size_t(in.gcount());
    h = hash_bytes(buf.data(), n, h);  // chained a chunk at a time: the same file, the same chunks
    size += n;
  }
  char text[64];
  std::snprintf(text, sizeof text, "%llu:%016llx", (unsigned long long)size, (unsigned long long)h);
  return text;
}

// 5397064 -> "5,397,064"
std::string with_commas(const std::string& digits) {
  std::string out;
  for (size_t i = 0; i < digits.size(); ++i) {
    if (i && (digits.size() - i) % 3 == 0) out += ',';
    out += digits[i];
  }
  return out;
}
}  // namespace

const std::string& program_fingerprint() {
  static const std::string fingerprint = compute();
  return fingerprint;
}

std::string describe_program(const std::string& path, const std::string& fingerprint) {
  const size_t colon = fingerprint.find(':');
  if (colon == std::string::npos) return path + " (not readable)";
  return path + ", " + with_commas(fingerprint.substr(0, colon)) + " bytes (fingerprint " +
         fingerprint.substr(colon + 1) + ")";
}

std::string program_path() {
  char path[4096] = {};
  return ::readlink("/proc/self/exe", path, sizeof path - 1) > 0 ? path : "";
}

}  // namespace engine::dist
