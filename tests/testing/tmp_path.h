// Where a test may write files: Bazel's per-test $TEST_TMPDIR (or /tmp when run by hand),
// and a fresh folder there whose files a test writes by their path inside it.
//
//   const std::string path = engine::testing::tmp_path("ckpt.safetensors");
//   FileTree t("v2");  t.write("/cgroup/a/cpu.max", "max 100000\n");  // under t.root
#pragma once

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>

namespace engine::testing {

inline std::string tmp_path(const std::string& name) {
  const char* dir = std::getenv("TEST_TMPDIR");
  return std::string(dir && *dir ? dir : "/tmp") + "/" + name;
}

struct FileTree {
  explicit FileTree(const std::string& name) : root(tmp_path(name)) {
    std::filesystem::remove_all(root);
    std::filesystem::create_directories(root);
  }
  void write(const std::string& path, const std::string& text) const {
    std::filesystem::create_directories(std::filesystem::path(root + path).parent_path());
    std::ofstream(root + path) << text;
  }
  std::string root;
};

}  // namespace engine::testing
