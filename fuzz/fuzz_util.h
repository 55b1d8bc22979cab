// Helpers for the fuzz targets: the parsers under test read files, so an input is written
// to a scratch file first (in $TEST_TMPDIR or $TMPDIR, one per process).
//
//   const std::string path = fuzz::write_scratch(data, size, ".safetensors");
//   try { load_safetensors(path); } catch (const engine::Error&) {}   // errors are fine, crashes are not
#pragma once

#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace fuzz {

// Under bazel test, in the test's own temporary folder (removed with it), else $TMPDIR.
inline std::string scratch_file(const char* suffix) {
  const char* dir = std::getenv("TEST_TMPDIR");
  if (!dir || !*dir) dir = std::getenv("TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/engine-fuzz-" + std::to_string(getpid()) + suffix;
}

inline std::string write_scratch(const uint8_t* data, size_t size, const char* suffix) {
  const std::string path = scratch_file(suffix);
  FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) std::abort();
  if (size && std::fwrite(data, 1, size, f) != size) std::abort();
  std::fclose(f);
  return path;
}

}  // namespace fuzz
