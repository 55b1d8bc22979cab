// The IDX reader: plain and gzipped files, and every malformed input named in its error.
#include <zlib.h>

#include <cstdlib>
#include <fstream>

#include "catch2/catch.hpp"
#include "tests/testing/tmp_path.h"
#include "data/idx.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::data;

namespace {

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary).write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
}

void write_gz(const std::string& path, const std::vector<uint8_t>& bytes) {
  gzFile f = gzopen(path.c_str(), "wb");
  gzwrite(f, bytes.data(), unsigned(bytes.size()));
  gzclose(f);
}

// A (2, 2, 3) image file with values 0, 10, 20, ...
std::vector<uint8_t> images_idx() {
  std::vector<uint8_t> b = {0, 0, 8, 3, 0, 0, 0, 2, 0, 0, 0, 2, 0, 0, 0, 3};
  for (int i = 0; i < 12; ++i) b.push_back(uint8_t(10 * i));
  return b;
}
}  // namespace

TEST_CASE("reads images and labels, plain or gzipped") {
  write_file(tmp_path("img.idx"), images_idx());
  write_gz(tmp_path("img.idx.gz"), images_idx());
  for (const char* name : {"img.idx", "img.idx.gz"}) {
    Tensor t = read_idx_images(tmp_path(name));
    REQUIRE(t.shape() == Shape{2, 2, 3});
    REQUIRE(t.at({1, 1, 2}) == Approx(110.0 / 255.0));
  }
  write_gz(tmp_path("lab.idx.gz"), {0, 0, 8, 1, 0, 0, 0, 3, 7, 0, 9});
  Tensor l = read_idx_labels(tmp_path("lab.idx.gz"));
  REQUIRE(l.dtype() == DType::Int64);
  REQUIRE(l.to_vector<int64_t>() == std::vector<int64_t>{7, 0, 9});
}

TEST_CASE("malformed IDX input is an error naming the file and the problem") {
  auto bytes = images_idx();
  bytes.pop_back();
  write_file(tmp_path("short.idx"), bytes);
  REQUIRE_THROWS_WITH(read_idx_images(tmp_path("short.idx")),
                      Catch::Contains("short.idx header promises 12 values of shape (2,2,3) but the file holds 11"));
  REQUIRE_THROWS_WITH(parse_idx({0, 1, 8, 1}, "x"), Catch::Contains("[idx] x does not start with the IDX magic"));
  REQUIRE_THROWS_WITH(parse_idx({0, 0, 0x0D, 1}, "x"), Catch::Contains("type code 0xd"));
  REQUIRE_THROWS_WITH(parse_idx({0, 0, 8, 9}, "x"), Catch::Contains("declares 9 dims"));
  REQUIRE_THROWS_WITH(parse_idx({0, 0, 8, 2, 0, 0}, "x"), Catch::Contains("truncated inside its header"));
  REQUIRE_THROWS_WITH(parse_idx({0, 0}, "x"), Catch::Contains("too short"));
  REQUIRE_THROWS_WITH(parse_idx({0, 0, 8, 2, 255, 255, 255, 255, 255, 255, 255, 255}, "x"), Catch::Contains("implausibly large"));
  REQUIRE_THROWS_WITH(read_idx_labels(tmp_path("img.idx")), Catch::Contains("should hold labels (N,), got shape (2,2,3)"));
  REQUIRE_THROWS_WITH(read_idx_images(tmp_path("missing.idx")), Catch::Contains("cannot open") && Catch::Contains("missing.idx"));
  // A gzip file cut in half.
  write_gz(tmp_path("full.gz"), std::vector<uint8_t>(100000, 7));
  std::ifstream in(tmp_path("full.gz"), std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write_file(tmp_path("cut.gz"), gz);
  REQUIRE_THROWS_WITH(read_idx_images(tmp_path("cut.gz")), Catch::Contains("cut.gz is corrupt or truncated"));
}
