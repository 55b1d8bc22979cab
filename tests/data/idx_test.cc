// The IDX reader: plain and gzipped files, and every malformed input named in its error.
#include <sys/resource.h>
#include <zlib.h>

#include <chrono>

#include <cstdlib>
#include <fstream>

#include "catch2/catch.hpp"
#include "data/idx.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;

using namespace engine;
using namespace engine::data;

namespace {

void write_file(const std::string& path, const std::vector<uint8_t>& bytes) {
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()), std::streamsize(bytes.size()));
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

TEST_CASE("a gzip bomb is refused after the bytes its header declares, not inflated whole") {
  // 12 declared values, then 256 MB of zeros: a 250 KB file.
  const std::string path = tmp_path("bomb.idx.gz");
  gzFile f = gzopen(path.c_str(), "wb9");
  const std::vector<uint8_t> head = images_idx(), zeros(1 << 20, 0);
  gzwrite(f, head.data(), unsigned(head.size()));
  for (int i = 0; i < 256; ++i) gzwrite(f, zeros.data(), unsigned(zeros.size()));
  gzclose(f);
  struct rusage before {
  }, after{};
  getrusage(RUSAGE_SELF, &before);
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE_THROWS_WITH(read_idx_images(path),
                      Catch::Contains("bomb.idx.gz holds more than the 28 bytes its header declares"));
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  getrusage(RUSAGE_SELF, &after);
  INFO("peak RSS grew by " << (after.ru_maxrss - before.ru_maxrss) << " KB; took " << seconds << " s");
  REQUIRE(after.ru_maxrss - before.ru_maxrss < 64 * 1024);  // inflating it whole takes 256 MB (and seconds)
}

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
  REQUIRE_THROWS_WITH(parse_idx({0, 0, 8, 2, 255, 255, 255, 255, 255, 255, 255, 255}, "x"),
                      Catch::Contains("implausibly large"));
  REQUIRE_THROWS_WITH(read_idx_labels(tmp_path("img.idx")),
                      Catch::Contains("should hold labels (N,), got shape (2,2,3)"));
  REQUIRE_THROWS_WITH(read_idx_images(tmp_path("missing.idx")),
                      Catch::Contains("cannot read " + tmp_path("missing.idx") + ": No such file"));
  // A gzip file cut in half.
  std::vector<uint8_t> labels = {0, 0, 8, 1, 0, 1, 0x86, 0xA0};  // 100000 labels
  labels.resize(labels.size() + 100000, 7);
  write_gz(tmp_path("full.gz"), labels);
  std::ifstream in(tmp_path("full.gz"), std::ios::binary);
  std::vector<uint8_t> gz((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  gz.resize(gz.size() / 2);
  write_file(tmp_path("cut.gz"), gz);
  REQUIRE_THROWS_WITH(read_idx_labels(tmp_path("cut.gz")), Catch::Contains("cut.gz is corrupt or truncated"));
}
