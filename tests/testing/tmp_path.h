// Where a test may write files: Bazel's per-test $TEST_TMPDIR (or /tmp when run by hand).
//
//   const std::string path = engine::testing::tmp_path("ckpt.safetensors");
#pragma once

#include <cstdlib>
#include <string>

namespace engine::testing {

inline std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/" + name;
}

}  // namespace engine::testing
