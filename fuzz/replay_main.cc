// Replays a fuzz target's corpus (every file under the folders given, and any file given
// by name) through its LLVMFuzzerTestOneInput, built with the ordinary compiler: the
// corpus, and every input that once crashed a target, become a regression test in
// `bazel test //...`.
//
//   replay fuzz/corpus/safetensors
//   replay crash-1234abcd            one input, as a libFuzzer binary takes it
#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace fs = std::filesystem;

// The inputs a command-line argument names: itself when it is a file, every file under it
// (sorted) when it is a folder.
static std::vector<fs::path> inputs_of(const std::string& arg) {
  if (fs::is_regular_file(arg)) return {arg};
  if (!fs::is_directory(arg)) throw std::runtime_error(arg + " is neither a file nor a folder");
  std::vector<fs::path> files;
  for (const auto& e : fs::recursive_directory_iterator(arg))
    if (e.is_regular_file()) files.push_back(e.path());
  std::sort(files.begin(), files.end());
  return files;
}

int main(int argc, char** argv) {
  size_t n = 0;
  std::string current;
  try {
    for (int i = 1; i < argc; ++i) {
      current = argv[i];
      for (const auto& f : inputs_of(argv[i])) {
        current = f.string();
        std::ifstream in(f, std::ios::binary);
        if (!in) throw std::runtime_error("cannot read it");
        const std::vector<uint8_t> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
        ++n;
      }
    }
  } catch (const std::exception& e) {  // a folder that cannot be listed, or a target that threw
    std::fprintf(stderr, "replay: %s: %s\n", current.c_str(), e.what());
    return 1;
  }
  if (n == 0) {
    std::fprintf(stderr, "replay: no inputs found under the given folders\n");
    return 1;
  }
  std::printf("replay: %zu inputs, none crashed\n", n);
  return 0;
}
