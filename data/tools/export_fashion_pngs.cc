// Writes the first `per_class` test images of each Fashion-MNIST class as PNG files, one
// folder per class, for the ImageFolder tests and the quickest demo:
//
//   bazel run //data:export_fashion_pngs -- $PWD/data/testdata/fashion_mnist_png 30
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

#include "data/fashion_mnist.h"
#include "data/image.h"
#include "tensor/parse.h"
#include "tools/flags/flags.h"

using namespace engine;
using namespace engine::data;

int main(int argc, char** argv) try {
  std::string out, per_class_text;
  Flags flags("export_fashion_pngs", "Writes the first PER_CLASS test images of each class as PNG files.");
  flags.add_positional("OUT_DIR", &out, "the folder to write (one subfolder per class)");
  flags.add_positional("PER_CLASS", &per_class_text, "images per class (1 to 1000)");
  flags.parse_or_exit(argc, argv);
  const int per_class = int(parse_int(per_class_text, "PER_CLASS", 1, 1000));
  auto test = fashion_mnist(/*train=*/false, {.normalize = false});
  // Folder names sort in label order: "0_t-shirt_top", "1_trouser", ...
  std::string folders[10];
  for (int c = 0; c < 10; ++c) {
    std::string name = kFashionMnistClasses[c];
    for (char& ch : name) ch = (ch == '/' || ch == ' ') ? '_' : char(std::tolower(ch));
    folders[c] = out + "/" + std::to_string(c) + "_" + name;
    std::filesystem::create_directories(folders[c]);
  }
  int written[10] = {};
  for (int64_t i = 0; i < test->size(); ++i) {
    const Example e = test->get(i);
    const int label = int(e.target.item());
    if (written[label] >= per_class) continue;
    char file[64];
    std::snprintf(file, sizeof file, "/%05lld.png", (long long)i);
    save_png(folders[label] + file, e.input);
    ++written[label];
  }
  std::printf("wrote %d images per class under %s\n", per_class, out.c_str());
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "export_fashion_pngs: %s\n", e.what());
  return 1;
}
