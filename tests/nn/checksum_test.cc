// Checksums in checkpoints: CRC32C against its published check values (both the crc32
// instruction's path and the table's), and a saved file that refuses to load once any bit
// of it has changed, naming the tensor, while files written elsewhere (no checksums) load.
#include <cstring>
#include <random>

#include "catch2/catch.hpp"
#include "nn/crc32c.h"
#include "nn/safetensors.h"
#include "tensor/ops.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using engine::testing::read_bytes;
using engine::testing::safetensors_file;
using engine::testing::tmp_path;
using engine::testing::write_bytes;

using namespace engine;
using namespace engine::nn;

namespace {

uint64_t header_length(const std::string& file) {
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(file[i])) << (8 * i);
  return n;
}

StateDict sample() {
  Generator g(3);
  return {{"0.weight", randn({3, 4}, &g)},
          {"0.bias", randn({3}, &g)},
          {"empty", zeros({0, 2})},
          {"step", from_vector(std::vector<int64_t>{41})},
          {"half", randn({5}, &g).to(DType::BFloat16)}};
}

bool same_bytes(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || a.dtype() != b.dtype()) return false;
  const size_t n = size_t(a.numel()) * dtype_size(a.dtype());
  return n == 0 || std::memcmp(a.contiguous().bytes(), b.contiguous().bytes(), n) == 0;
}

bool same_state(const StateDict& a, const StateDict& b) {
  if (a.size() != b.size()) return false;
  for (const auto& [k, t] : a)
    if (!b.count(k) || !same_bytes(t, b.at(k))) return false;
  return true;
}

}  // namespace

TEST_CASE("CRC32C gives the published check values, on both paths, and continues over pieces") {
  // "123456789" is the usual check string; the 32-byte vectors are RFC 3720's (iSCSI), B.4.
  std::string zeros32(32, '\0'), ones32(32, '\xff'), rising(32, '\0');
  for (int i = 0; i < 32; ++i) rising[i] = char(i);
  for (auto f : {crc32c, crc32c_portable}) {
    REQUIRE(f("123456789", 9, 0) == 0xE3069283u);
    REQUIRE(f(zeros32.data(), 32, 0) == 0x8A9136AAu);
    REQUIRE(f(ones32.data(), 32, 0) == 0x62A8AB43u);
    REQUIRE(f(rising.data(), 32, 0) == 0x46DD794Eu);
    REQUIRE(f("", 0, 0) == 0u);
  }
  std::mt19937 rng(7);
  std::string bytes(3000, '\0');
  for (char& c : bytes) c = char(rng());
  for (size_t n : {1, 7, 8, 9, 63, 64, 65, 1000, 2999}) {
    INFO("n = " << n);
    const uint32_t whole = crc32c(bytes.data(), n);
    REQUIRE(whole == crc32c_portable(bytes.data(), n));
    for (size_t cut : {size_t(0), n / 3, n - 1})  // in two pieces, the first result passed on
      REQUIRE(crc32c(bytes.data() + cut, n - cut, crc32c(bytes.data(), cut)) == whole);
  }
}

TEST_CASE("a checkpoint with any one bit changed is refused; the checksums are not metadata") {
  const std::string path = tmp_path("sums.safetensors");
  const StateDict sd = sample();
  save_safetensors(path, sd, {{"epoch", "3"}});
  Metadata meta;
  REQUIRE(same_state(load_safetensors(path, &meta), sd));
  REQUIRE(meta == Metadata{{"epoch", "3"}});  // the checksums stay inside the file

  const std::string good = read_bytes(path);
  const uint64_t n = header_length(good);
  REQUIRE(good.substr(8, n).find(std::string("\"") + kChecksumKey + "\":\"") != std::string::npos);

  SECTION("a bit flipped in a tensor's bytes names that tensor") {
    const std::string data = good.substr(8 + n);
    // 0.bias holds bytes [0, 12) of the data section (the keys in order: 0.bias, 0.weight, ...).
    std::string bad = good;
    bad[8 + n + 5] ^= 0x10;
    write_bytes(path, bad);
    REQUIRE_THROWS_WITH(load_safetensors(path),
                        Catch::Contains("tensor \"0.bias\" does not match the checksum saved with it") &&
                            Catch::Contains("Nothing was loaded"));
    bad = good;
    bad[bad.size() - 1] ^= 0x01;  // the last byte: "step", an int64
    write_bytes(path, bad);
    REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains("tensor \"step\" does not match"));
  }

  SECTION("a metadata value changed (epoch 3 -> 7, one bit) is caught by the header's checksum") {
    std::string bad = good;
    const size_t at = bad.find("\"epoch\":\"3\"");
    REQUIRE(at != std::string::npos);
    bad[at + 9] ^= 0x04;  // '3' -> '7'
    write_bytes(path, bad);
    REQUIRE_THROWS_WITH(load_safetensors(path),
                        Catch::Contains("the header (tensor names, shapes and metadata) does not match the checksum"));
  }

  SECTION("every single-bit change anywhere in the file: refused, or (padding) the same values") {
    int refused = 0, same = 0, renamed = 0;
    for (size_t byte = 0; byte < good.size(); ++byte) {
      for (int bit = 0; bit < 8; ++bit) {
        std::string bad = good;
        bad[byte] ^= char(1 << bit);
        write_bytes(path, bad);
        try {
          Metadata m;
          const StateDict back = load_safetensors(path, &m);
          INFO("byte " << byte << " bit " << bit << " loaded");
          REQUIRE(same_state(back, sd));  // never other numbers, silently
          // The one change that turns the check off: the entry's own name, which then
          // comes back as one more metadata entry (the values are still those saved).
          Metadata extra = m;
          for (const auto& entry : meta) REQUIRE(extra.erase(entry.first) == 1);
          if (!extra.empty()) {
            REQUIRE(extra.size() == 1);
            REQUIRE(extra.begin()->first.size() == std::strlen(kChecksumKey));
            ++renamed;
          }
          ++same;
        } catch (const Error&) {
          ++refused;
        }
      }
    }
    INFO(refused << " refused, " << same << " loaded the same values (" << renamed << " with the entry renamed)");
    REQUIRE(refused > 8 * int(good.size()) * 9 / 10);
    REQUIRE(renamed <= 8 * int(std::strlen(kChecksumKey)));
  }
}

TEST_CASE("a file without checksums (written elsewhere, or with the entry removed) loads unchecked") {
  const std::string path = tmp_path("nosums.safetensors");
  const StateDict sd = sample();
  save_safetensors(path, sd, {{"epoch", "3"}});
  const std::string good = read_bytes(path);
  const uint64_t n = header_length(good);
  std::string header = good.substr(8, n);
  // Remove the entry: ,"engine.crc32c":"..." (it follows "epoch"), then change a value.
  const size_t at = header.find(std::string(",\"") + kChecksumKey);
  REQUIRE(at != std::string::npos);
  header.erase(at, header.find('"', header.find(":\"", at) + 2) + 1 - at);
  std::string data = good.substr(8 + n);
  data[0] ^= 0x10;  // no checksum to say so: loaded as it is, as any reader would
  write_bytes(path, safetensors_file(header, data));
  Metadata meta;
  const StateDict back = load_safetensors(path, &meta);
  REQUIRE(meta == Metadata{{"epoch", "3"}});
  REQUIRE(!same_bytes(back.at("0.bias"), sd.at("0.bias")));
  REQUIRE(same_bytes(back.at("0.weight"), sd.at("0.weight")));
}

TEST_CASE("malformed checksums, and a caller's metadata using their name, are named") {
  const std::string path = tmp_path("badsums.safetensors");
  REQUIRE_THROWS_WITH(save_safetensors(path, {{"w", ones({2})}}, {{kChecksumKey, "x"}}),
                      Catch::Contains("metadata key \"engine.crc32c\" is the file's own checksum"));
  const std::string data(8, '\0');
  const std::string entry = R"("w":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  auto with_sums = [&](const std::string& sums) {
    write_bytes(path, safetensors_file(R"({"__metadata__":{"engine.crc32c":")" + sums + "\"}," + entry + "}", data));
  };
  with_sums("0123abcd");  // the header's only: one tensor's is missing
  REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains("holds 1 checksums, but the file has 1 tensors"));
  with_sums("0123abcd zz");
  REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains("holds \"zz\" where a checksum of 8 hex digits"));
  with_sums("0123abcd  00000000");
  REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains("holds \"\" where a checksum"));
  with_sums("0123abcd 00000000");  // well formed, but not this header's
  REQUIRE_THROWS_WITH(load_safetensors(path), Catch::Contains("the header (tensor names, shapes and metadata)"));
}
