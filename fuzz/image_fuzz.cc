// Fuzzes image decoding (stb_image through data/image.h), in grey and in RGB: any bytes
// decode or fail with engine::Error naming the file. Inputs whose header claims more than
// 2^20 pixels are skipped: decoding them only measures how fast memory is allocated and
// filled (load_image itself refuses claims over 2^28 values: pixels x channels).
#include <cstdlib>
#include <vector>

#include "data/image.h"
#include "data/image_checks.h"
#include "fuzz/fuzz_util.h"
#include "stb/stb_image.h"
#include "tensor/check.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // stb's info reads a JPEG's Huffman tables as its decoder does: checked first, as
  // load_image does (data/image_checks.h).
  try {
    engine::data::check_jpeg_huffman_tables(std::vector<uint8_t>(data, data + size), "input");
  } catch (const engine::Error&) {
    return 0;
  }
  int w = 0, h = 0, c = 0;
  // (A top-down BMP's height comes back negative.)
  if (stbi_info_from_memory(data, int(size), &w, &h, &c) && std::abs(int64_t(w) * h) > (int64_t(1) << 20)) return 0;
  const std::string path = fuzz::write_scratch(data, size, ".img");
  for (int channels : {1, 3}) {
    try {
      const engine::Tensor t = engine::data::load_image(path, channels);
      (void)t.numel();
    } catch (const engine::Error&) {}
  }
  return 0;
}
