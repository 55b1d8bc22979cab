// Fuzzes checkpoint metadata: the input, split at newlines into KEY=VALUE pairs, is saved
// as a checkpoint's __metadata__, read back (it must come back unchanged), and its
// "epoch" read as the trainer reads it on --resume: an integer in range or engine::Error.
#include <cstdlib>
#include <sstream>

#include "fuzz/fuzz_util.h"
#include "lessons/fashion_mnist/trainer.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"
#include "tensor/parse.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace engine;
  const std::string text(reinterpret_cast<const char*>(data), size);
  nn::Metadata meta;
  std::istringstream lines(text);
  for (std::string line; std::getline(lines, line);) {
    const size_t eq = line.find('=');
    if (eq != std::string::npos) meta[line.substr(0, eq)] = line.substr(eq + 1);
  }
  const std::string path = fuzz::scratch_file(".safetensors");
  try {
    nn::save_safetensors(path, {{"w", ones({2})}}, meta);
    nn::Metadata back;
    (void)nn::load_safetensors(path, &back);
    if (back != meta) std::abort();  // what was saved is what is read
    const int epoch = fmnist::checkpoint_epoch(back, path);
    if (epoch < 0 || epoch > fmnist::kMaxEpochs) std::abort();
  } catch (const Error&) {}
  for (const auto& [key, value] : meta) {
    try {
      (void)parse_double(value, key, -1e300, 1e300);
    } catch (const Error&) {}
  }
  return 0;
}
