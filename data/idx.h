// The IDX format of MNIST and Fashion-MNIST, read directly or through gzip (zlib).
//
// An IDX file is: two zero bytes, a type code (0x08 = unsigned byte), the number of dims,
// each dim as a big-endian uint32, then the values in row-major order.
//
//   Tensor images = read_idx_images("train-images-idx3-ubyte.gz");  // (60000, 28, 28) float32 in [0, 1]
//   Tensor labels = read_idx_labels("train-labels-idx1-ubyte.gz");  // (60000,) int64
//
// A missing, truncated or malformed file throws engine::Error naming the file and what is
// wrong; nothing is ever read past what the header promises and the file holds.
#pragma once

#include <string>

#include "tensor/tensor.h"

namespace engine::data {

// The raw unsigned-byte array of an IDX file: its shape and values.
struct IdxArray {
  Shape shape;
  std::vector<uint8_t> values;
};

// Parses IDX bytes (already decompressed). `name` is used in error messages.
IdxArray parse_idx(const std::vector<uint8_t>& bytes, const std::string& name);

// Reads an IDX file's bytes, gunzipping it when it starts with the gzip magic bytes. Reads
// no further than the size its header declares (plus one byte to notice more): a file
// that holds more is an error, so a gzip bomb is never inflated whole.
std::vector<uint8_t> read_idx_bytes(const std::string& path);

Tensor read_idx_images(const std::string& path);  // float32 (N, H, W), values / 255
Tensor read_idx_labels(const std::string& path);  // int64 (N,)

}  // namespace engine::data
