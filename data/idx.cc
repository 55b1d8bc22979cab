#include "data/idx.h"

#include <zlib.h>

#include <cerrno>
#include <cstring>
#include <fstream>

namespace engine::data {

std::vector<uint8_t> read_maybe_gzipped(const std::string& path) {
  std::ifstream probe(path, std::ios::binary);
  ENGINE_REQUIRE(probe.good(), "[idx] cannot open ", path, ": ", std::strerror(errno));
  probe.close();
  // gzread reads gzip streams and passes plain files through unchanged.
  gzFile f = gzopen(path.c_str(), "rb");
  ENGINE_REQUIRE(f != nullptr, "[idx] cannot open ", path);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  while (true) {
    const int n = gzread(f, buf, sizeof buf);
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error("[idx] " + path + " is corrupt or truncated: " + msg);
    }
    if (n == 0) break;
    out.insert(out.end(), buf, buf + n);
  }
  // A truncated gzip stream reads as a short file without an error from gzread on some
  // zlib versions; gzclose reports the missing trailer.
  const int status = gzclose(f);
  ENGINE_REQUIRE(status == Z_OK, "[idx] ", path, " is corrupt or truncated (gzip stream did not end cleanly)");
  return out;
}

IdxArray parse_idx(const std::vector<uint8_t>& b, const std::string& name) {
  ENGINE_REQUIRE(b.size() >= 4, "[idx] ", name, " is too short for an IDX header (", b.size(), " bytes)");
  ENGINE_REQUIRE(b[0] == 0 && b[1] == 0, "[idx] ", name, " does not start with the IDX magic (two zero bytes)");
  ENGINE_REQUIRE(b[2] == 0x08, "[idx] ", name, " holds type code 0x", std::hex, int(b[2]),
                 "; only unsigned bytes (0x08) are supported");
  const int ndim = b[3];
  ENGINE_REQUIRE(ndim >= 1 && ndim <= 4, "[idx] ", name, " declares ", ndim, " dims; expected 1 to 4");
  ENGINE_REQUIRE(b.size() >= 4 + 4 * size_t(ndim), "[idx] ", name, " is truncated inside its header");
  IdxArray a;
  uint64_t count = 1;
  for (int d = 0; d < ndim; ++d) {
    const uint8_t* p = b.data() + 4 + 4 * d;
    const uint64_t size = (uint64_t(p[0]) << 24) | (uint64_t(p[1]) << 16) | (uint64_t(p[2]) << 8) | p[3];
    a.shape.push_back(int64_t(size));
    count *= size;
    ENGINE_REQUIRE(count <= (uint64_t(1) << 34), "[idx] ", name, " declares an implausibly large array");
  }
  const size_t header = 4 + 4 * size_t(ndim);
  ENGINE_REQUIRE(b.size() - header == count, "[idx] ", name, " header promises ", count, " values of shape ",
                 shape_str(a.shape), " but the file holds ", b.size() - header, " (truncated or corrupt)");
  a.values.assign(b.begin() + header, b.end());
  return a;
}

Tensor read_idx_images(const std::string& path) {
  IdxArray a = parse_idx(read_maybe_gzipped(path), path);
  ENGINE_REQUIRE(a.shape.size() == 3, "[idx] ", path, " should hold images (N, H, W), got shape ", shape_str(a.shape));
  Tensor t = empty(a.shape);
  float* p = t.data<float>();
  for (size_t i = 0; i < a.values.size(); ++i) p[i] = float(a.values[i]) * (1.0f / 255.0f);
  return t;
}

Tensor read_idx_labels(const std::string& path) {
  IdxArray a = parse_idx(read_maybe_gzipped(path), path);
  ENGINE_REQUIRE(a.shape.size() == 1, "[idx] ", path, " should hold labels (N,), got shape ", shape_str(a.shape));
  Tensor t = empty(a.shape, DType::Int64);
  int64_t* p = t.data<int64_t>();
  for (size_t i = 0; i < a.values.size(); ++i) p[i] = a.values[i];
  return t;
}

}  // namespace engine::data
