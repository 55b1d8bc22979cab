// Fuzzes the safetensors reader: any bytes must load or fail with engine::Error, never
// crash, read out of bounds or allocate without bound.
#include "fuzz/fuzz_util.h"
#include "nn/safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string path = fuzz::write_scratch(data, size, ".safetensors");
  try {
    engine::nn::Metadata meta;
    const engine::nn::StateDict sd = engine::nn::load_safetensors(path, &meta);
    for (const auto& [key, t] : sd) (void)t.numel();
  } catch (const engine::Error&) {}
  return 0;
}
