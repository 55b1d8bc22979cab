#include "data/idx.h"

#include <zlib.h>

#include <algorithm>

#include "tensor/input_file.h"

namespace engine::data {

namespace {

// The header's promise: the array's shape, how many values follow, and the header's length.
struct IdxHeader {
  Shape shape;
  uint64_t count = 1;
  size_t bytes = 0;
};

IdxHeader parse_header(const std::vector<uint8_t>& b, const std::string& name) {
  ENGINE_REQUIRE(b.size() >= 4, "[idx] ", name, " is too short for an IDX header (", b.size(), " bytes)");
  ENGINE_REQUIRE(b[0] == 0 && b[1] == 0, "[idx] ", name, " does not start with the IDX magic (two zero bytes)");
  ENGINE_REQUIRE(b[2] == 0x08, "[idx] ", name, " holds type code 0x", std::hex, int(b[2]),
                 "; only unsigned bytes (0x08) are supported");
  const int ndim = b[3];
  ENGINE_REQUIRE(ndim >= 1 && ndim <= 4, "[idx] ", name, " declares ", ndim, " dims; expected 1 to 4");
  ENGINE_REQUIRE(b.size() >= 4 + 4 * size_t(ndim), "[idx] ", name, " is truncated inside its header");
  IdxHeader h;
  for (int d = 0; d < ndim; ++d) {
    const uint8_t* p = b.data() + 4 + 4 * d;
    const uint64_t size = (uint64_t(p[0]) << 24) | (uint64_t(p[1]) << 16) | (uint64_t(p[2]) << 8) | p[3];
    h.shape.push_back(int64_t(size));
    h.count *= size;
    ENGINE_REQUIRE(h.count <= (uint64_t(1) << 34), "[idx] ", name, " declares an implausibly large array");
  }
  h.bytes = 4 + 4 * size_t(ndim);
  return h;
}

// Appends bytes from f until `out` holds `size` of them or the stream ends.
void read_up_to(gzFile f, size_t size, std::vector<uint8_t>& out, const std::string& path) {
  uint8_t buf[1 << 16];
  while (out.size() < size) {
    const int n = gzread(f, buf, unsigned(std::min(sizeof buf, size - out.size())));
    if (n < 0) {
      int code = 0;
      const std::string msg = gzerror(f, &code);
      gzclose(f);
      throw Error("[idx] " + path + " is corrupt or truncated: " + msg);
    }
    if (n == 0) return;
    out.insert(out.end(), buf, buf + n);
  }
}

}  // namespace

std::vector<uint8_t> read_idx_bytes(const std::string& path) {
  const std::string not_file = engine::not_a_file(path);  // a FIFO would block gzopen for good
  ENGINE_REQUIRE(not_file.empty(), "[idx] cannot read ", path, not_file);
  // gzread reads gzip streams and passes plain files through unchanged.
  gzFile f = gzopen(path.c_str(), "rb");
  ENGINE_REQUIRE(f != nullptr, "[idx] cannot open ", path);
  // The header first; then exactly the values it declares and one byte more, so that a
  // file holding more (a gzip bomb: 3 GB from 3 MB) is refused without inflating it.
  std::vector<uint8_t> b;
  read_up_to(f, 4, b, path);
  if (b.size() == 4) read_up_to(f, 4 + 4 * size_t(b[3]), b, path);
  uint64_t want = b.size();
  try {
    const IdxHeader h = parse_header(b, path);
    want = h.bytes + h.count;
  } catch (const Error&) {
    gzclose(f);
    throw;
  }
  read_up_to(f, want + 1, b, path);
  if (b.size() > want) {
    gzclose(f);
    throw Error("[idx] " + path + " holds more than the " + std::to_string(want) +
                " bytes its header declares; stopped reading there (corrupt, or not an IDX file)");
  }
  // A truncated gzip stream reads as a short file without an error from gzread on some
  // zlib versions; gzclose reports the missing trailer.
  const int status = gzclose(f);
  ENGINE_REQUIRE(status == Z_OK, "[idx] ", path, " is corrupt or truncated (gzip stream did not end cleanly)");
  return b;
}

IdxArray parse_idx(const std::vector<uint8_t>& b, const std::string& name) {
  const IdxHeader h = parse_header(b, name);
  IdxArray a;
  a.shape = h.shape;
  ENGINE_REQUIRE(b.size() - h.bytes == h.count, "[idx] ", name, " header promises ", h.count, " values of shape ",
                 shape_str(a.shape), " but the file holds ", b.size() - h.bytes, " (truncated or corrupt)");
  a.values.assign(b.begin() + h.bytes, b.end());
  return a;
}

Tensor read_idx_images(const std::string& path) {
  IdxArray a = parse_idx(read_idx_bytes(path), path);
  ENGINE_REQUIRE(a.shape.size() == 3, "[idx] ", path, " should hold images (N, H, W), got shape ", shape_str(a.shape));
  Tensor t = empty(a.shape);
  float* p = t.data<float>();
  for (size_t i = 0; i < a.values.size(); ++i) p[i] = float(a.values[i]) * (1.0f / 255.0f);
  return t;
}

Tensor read_idx_labels(const std::string& path) {
  IdxArray a = parse_idx(read_idx_bytes(path), path);
  ENGINE_REQUIRE(a.shape.size() == 1, "[idx] ", path, " should hold labels (N,), got shape ", shape_str(a.shape));
  Tensor t = empty(a.shape, DType::Int64);
  int64_t* p = t.data<int64_t>();
  for (size_t i = 0; i < a.values.size(); ++i) p[i] = a.values[i];
  return t;
}

}  // namespace engine::data
