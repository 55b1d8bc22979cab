// Replays a fuzz target's corpus (every file under the folders given) through its
// LLVMFuzzerTestOneInput, built with the ordinary compiler: the corpus, and every input
// that once crashed a target, become a regression test in `bazel test //...`.
//
//   replay fuzz/corpus/safetensors
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

int main(int argc, char** argv) {
  size_t n = 0;
  for (int i = 1; i < argc; ++i) {
    std::vector<std::filesystem::path> files;
    for (const auto& e : std::filesystem::recursive_directory_iterator(argv[i]))
      if (e.is_regular_file()) files.push_back(e.path());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) {
      std::ifstream in(f, std::ios::binary);
      const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
      LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      ++n;
    }
  }
  if (n == 0) {
    std::fprintf(stderr, "replay: no inputs found under the given folders\n");
    return 1;
  }
  std::printf("replay: %zu inputs, none crashed\n", n);
  return 0;
}
