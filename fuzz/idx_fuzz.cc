// Fuzzes the IDX reader: raw bytes straight into parse_idx, and the same bytes as a file
// through the gzip-aware reader (inputs that start with gzip's magic exercise zlib).
#include "data/idx.h"
#include "fuzz/fuzz_util.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    (void)engine::data::parse_idx(std::vector<uint8_t>(data, data + size), "fuzz input");
  } catch (const engine::Error&) {}
  const std::string path = fuzz::write_scratch(data, size, ".idx");
  try {
    (void)engine::data::parse_idx(engine::data::read_idx_bytes(path), path);
  } catch (const engine::Error&) {}
  return 0;
}
