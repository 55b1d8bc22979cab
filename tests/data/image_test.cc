// Images through stb_image: decoding, round trips, ImageFolder, and bad files named.
#include <sys/stat.h>
#include <unistd.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include "catch2/catch.hpp"
#include "data/dataloader.h"
#include "data/image.h"
#include "stb/stb_image_write.h"
#include "tensor/ops.h"
#include "tests/testing/file_bytes.h"
#include "tests/testing/tmp_path.h"

using engine::testing::tmp_path;
using engine::testing::write_bytes;

using namespace engine;
using namespace engine::data;

namespace {
const std::string kPngs = "data/testdata/fashion_mnist_png";
}  // namespace

TEST_CASE("save_png then load_image gives the same pixels, grey and RGB") {
  Generator g(0);
  // Values on the 1/255 grid survive 8-bit storage exactly.
  Tensor grey = clamp(rand({1, 5, 7}, &g) * 255.0, 0, 255).to(DType::Int64).to(DType::Float32) / 255.0;
  save_png(tmp_path("grey.png"), grey);
  Tensor back = load_image(tmp_path("grey.png"));
  REQUIRE(back.shape() == Shape{1, 5, 7});
  REQUIRE(max(abs(back - grey)).item() < 1e-6);
  Tensor rgb = clamp(rand({3, 4, 6}, &g) * 255.0, 0, 255).to(DType::Int64).to(DType::Float32) / 255.0;
  save_png(tmp_path("rgb.png"), rgb);
  REQUIRE(max(abs(load_image(tmp_path("rgb.png")) - rgb)).item() < 1e-6);
  // Converting on load: RGB -> grey gives one channel; grey -> RGB repeats it.
  REQUIRE(load_image(tmp_path("rgb.png"), 1).shape() == Shape{1, 4, 6});
  Tensor g3 = load_image(tmp_path("grey.png"), 3);
  REQUIRE(g3.shape() == Shape{3, 5, 7});
  REQUIRE(max(abs(g3.select(0, 2) - grey.select(0, 0))).item() < 1e-6);
}

TEST_CASE("save_png writes through no link put where its temporary goes") {
  // The temporary's name (PATH.tmp.PID) is predictable: a link there had its target
  // overwritten with the PNG.
  const std::string path = tmp_path("linked.png"), target = tmp_path("linked_target");
  std::ofstream(target) << "precious";
  const std::string tmp = path + ".tmp." + std::to_string(getpid());
  std::filesystem::remove(tmp);
  std::filesystem::create_symlink(target, tmp);
  save_png(path, full({1, 2, 3}, 1.0));
  REQUIRE(load_image(path).shape() == Shape{1, 2, 3});
  std::ifstream in(target);
  std::string kept;
  in >> kept;
  REQUIRE(kept == "precious");
  REQUIRE(!std::filesystem::exists(std::filesystem::symlink_status(tmp)));
}

TEST_CASE("save_png refuses a device or a named pipe at its path instead of replacing it") {
  // Checked on a FIFO of the test's own: a save onto /dev/null, run as root, made it a file.
  const std::string fifo = tmp_path("fifo.png");
  unlink(fifo.c_str());
  REQUIRE(mkfifo(fifo.c_str(), 0644) == 0);
  REQUIRE_THROWS_WITH(save_png(fifo, full({1, 2, 3}, 1.0)),
                      Catch::Contains("[save_png] cannot write " + fifo + ": it is a named pipe (FIFO), not a file"));
  struct stat st {};
  CHECK((lstat(fifo.c_str(), &st) == 0 && S_ISFIFO(st.st_mode)));
}

TEST_CASE("ImageFolder over the shipped Fashion-MNIST PNGs") {
  ImageFolder ds(kPngs, {.channels = 1});
  REQUIRE(ds.classes().size() == 10);
  REQUIRE(ds.classes()[9] == "9_ankle_boot");
  REQUIRE(ds.size() == 300);
  const Example e = ds.get(299);
  REQUIRE(e.input.shape() == Shape{1, 28, 28});
  REQUIRE(e.target.item() == 9);
  REQUIRE(ds.path(0).find("0_t-shirt_top") != std::string::npos);
  // Through the DataLoader, batches stack images and labels.
  DataLoader loader(std::make_shared<ImageFolder>(kPngs, ImageFolderOptions{.channels = 1}), {.batch_size = 32});
  int64_t count = 0;
  for (const Example& b : loader) {
    REQUIRE(b.input.dim() == 4);
    count += b.input.size(0);
  }
  REQUIRE(count == 300);
}

TEST_CASE("bad image files are errors that name the file") {
  std::ofstream(tmp_path("junk.png")) << "this is not an image";
  REQUIRE_THROWS_WITH(load_image(tmp_path("junk.png")),
                      Catch::Contains("[load_image] cannot decode") && Catch::Contains("junk.png"));
  REQUIRE_THROWS_WITH(load_image(tmp_path("absent.png")), Catch::Contains("absent.png"));
  // A real PNG cut short.
  std::ifstream in(kPngs + "/0_t-shirt_top/00019.png", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  REQUIRE(bytes.size() > 100);
  std::ofstream(tmp_path("cut.png"), std::ios::binary) << bytes.substr(0, bytes.size() / 2);
  REQUIRE_THROWS_WITH(load_image(tmp_path("cut.png")), Catch::Contains("cut.png"));
  REQUIRE_THROWS_WITH(ImageFolder(tmp_path("no_such_dir")), Catch::Contains("is not a directory"));
  REQUIRE_THROWS_WITH(save_png(tmp_path("x.png"), zeros({2, 2, 2, 2})),
                      Catch::Contains("[save_png] expects (C, H, W) or (H, W)"));
}

// A PNG by hand: the signature, an IHDR chunk claiming w x h pixels of `color` (0 grey, 2
// RGB), 8 bits each, then the chunks given (type and data). CRCs are left 0: stb does not
// check them.
static void write_png(const std::string& path, uint32_t w, uint32_t h, uint8_t color,
                      const std::vector<std::pair<std::string, std::string>>& chunks = {}) {
  auto be32 = [](uint32_t v) {
    std::string s;
    for (int shift = 24; shift >= 0; shift -= 8) s += char((v >> shift) & 0xFF);
    return s;
  };
  auto chunk = [&](const std::string& type, const std::string& data) {
    return be32(uint32_t(data.size())) + type + data + be32(0);
  };
  std::string b = "\x89PNG\r\n\x1a\n" + chunk("IHDR", be32(w) + be32(h) + std::string{char(8), char(color), 0, 0, 0});
  for (const auto& [type, data] : chunks) b += chunk(type, data);
  std::ofstream(path, std::ios::binary) << b;
}

// A PNG that holds only its header: enough for the size check; nothing to decode.
static void write_png_header(const std::string& path, uint32_t w, uint32_t h, uint8_t color) {
  write_png(path, w, h, color);
}

// zlib's format around raw bytes, in one stored (uncompressed) deflate block, with the
// Adler-32 checksum at the end.
static std::string zlib_stored(const std::string& raw) {
  std::string z = "\x78\x01\x01";
  z += char(raw.size() & 0xFF), z += char(raw.size() >> 8);
  z += char(~raw.size() & 0xFF), z += char((~raw.size() >> 8) & 0xFF);
  z += raw;
  uint32_t a = 1, b = 0;
  for (unsigned char c : raw) a = (a + c) % 65521, b = (b + a) % 65521;
  const uint32_t adler = (b << 16) | a;
  for (int s = 24; s >= 0; s -= 8) z += char((adler >> s) & 0xFF);
  return z;
}

TEST_CASE("a grey PNG with a transparent colour (tRNS) decodes to its own channel count") {
  // 2x1 grey pixels 10 and 200; tRNS makes grey 10 transparent. stb then fills a grey +
  // alpha buffer while it reports one channel: read with one channel's stride, the second
  // pixel came out as the first one's alpha (0).
  const std::string rows = std::string("\0", 1) + "\x0a\xc8";  // filter byte 0, then the pixels
  write_png(tmp_path("trns.png"), 2, 1, 0,
            {{"tRNS", std::string("\0\x0a", 2)}, {"IDAT", zlib_stored(rows)}, {"IEND", ""}});
  const Tensor img = load_image(tmp_path("trns.png"));
  REQUIRE(img.shape() == Shape{1, 1, 2});
  CHECK(img.data<float>()[0] == Approx(10 / 255.0f));
  CHECK(img.data<float>()[1] == Approx(200 / 255.0f));
  // Asked for RGBA, the transparency is there.
  const Tensor rgba = load_image(tmp_path("trns.png"), 4);
  CHECK(rgba.data<float>()[3 * 2 + 0] == 0.0f);  // alpha of pixel 0
  CHECK(rgba.data<float>()[3 * 2 + 1] == 1.0f);  // alpha of pixel 1
}

TEST_CASE("an image claiming more than 2^28 values (1 GiB of floats) is refused before it is decoded") {
  // 9460 x 9460 = 89,491,600 pixels: 268,474,800 values in RGB, over 2^28 = 268,435,456.
  write_png_header(tmp_path("big_rgb.png"), 9460, 9460, 2);
  REQUIRE_THROWS_WITH(load_image(tmp_path("big_rgb.png")),
                      Catch::Contains("big_rgb.png claims 9460x9460 pixels x 3 channel(s) = 268474800 values") &&
                          Catch::Contains("1 GiB as float32"));
  // Asked for one channel the same claim is 89 M values: allowed, so decoding is tried (and
  // fails, the pixels are missing).
  REQUIRE_THROWS_WITH(load_image(tmp_path("big_rgb.png"), 1), Catch::Contains("cannot decode"));
  // A grey image may have 2^28 pixels, and not one more.
  write_png_header(tmp_path("big_grey.png"), 16384, 16385, 0);
  REQUIRE_THROWS_WITH(load_image(tmp_path("big_grey.png")), Catch::Contains("values; images over 268435456 values"));
  write_png_header(tmp_path("max_grey.png"), 16384, 16384, 0);
  REQUIRE_THROWS_WITH(load_image(tmp_path("max_grey.png")), Catch::Contains("cannot decode"));
  // ...and as RGBA, a quarter as many.
  REQUIRE_THROWS_WITH(load_image(tmp_path("max_grey.png"), 4), Catch::Contains("x 4 channel(s)"));
}

// A 24-bit BMP (BITMAPINFOHEADER, no palette): `rgb` holds h rows of w pixels, top row first;
// they are stored bottom-up (a positive height) or top-down (a negative one), each row padded
// to 4 bytes. The last `cut` bytes of the file are left out; an empty `rgb` writes the
// header alone.
static void write_bmp(const std::string& path, int32_t w, int32_t h, bool top_down, const std::vector<uint8_t>& rgb,
                      size_t cut = 0) {
  const uint32_t row = (uint32_t(w) * 3 + 3) / 4 * 4, pixels = row * uint32_t(h);
  std::string b;
  auto put = [&](uint32_t v, int n) {
    for (int i = 0; i < n; ++i) b.push_back(char(v >> (8 * i)));
  };
  b.push_back('B'), b.push_back('M');
  put(54 + pixels, 4), put(0, 4), put(54, 4);                                    // file size, reserved, offset
  put(40, 4), put(uint32_t(w), 4), put(uint32_t(top_down ? -h : h), 4);          // header size, width, height
  put(1, 2), put(24, 2), put(0, 4), put(pixels, 4), put(2835, 4), put(2835, 4);  // planes, bits, BI_RGB, ...
  put(0, 4), put(0, 4);
  for (int32_t r = 0; r < h && !rgb.empty(); ++r) {
    const int32_t y = top_down ? r : h - 1 - r;
    for (int32_t x = 0; x < w; ++x)
      for (int k = 2; k >= 0; --k) b.push_back(char(rgb[size_t((y * w + x) * 3 + k)]));  // stored B, G, R
    b.resize(b.size() + row - uint32_t(w) * 3, 0);
  }
  b.resize(b.size() - cut);
  write_bytes(path, b);
}

TEST_CASE("a BMP loads bottom-up and top-down; one cut short is refused, not filled with black") {
  // 3 x 2 pixels: rows of 9 bytes padded to 12.
  std::vector<uint8_t> rgb(18);
  for (size_t i = 0; i < rgb.size(); ++i) rgb[i] = uint8_t(10 * i + 5);
  for (bool top_down : {false, true}) {
    INFO("top-down " << top_down);
    write_bmp(tmp_path("ok.bmp"), 3, 2, top_down, rgb);
    const Tensor img = load_image(tmp_path("ok.bmp"));
    REQUIRE(img.shape() == Shape{3, 2, 3});
    for (int k = 0; k < 3; ++k)
      for (int p = 0; p < 6; ++p) CHECK(img.at({k, p / 3, p % 3}) == Approx(rgb[size_t(p * 3 + k)] / 255.0));
    // One byte short (of the last row's padding): stb would decode it, the missing bytes 0.
    write_bmp(tmp_path("cut.bmp"), 3, 2, top_down, rgb, 1);
    REQUIRE_THROWS_WITH(load_image(tmp_path("cut.bmp")),
                        Catch::Contains("cut.bmp is cut short: its BMP header declares 3x2 pixels of 24 bits from "
                                        "byte 54, 78 bytes in all, but the file holds 77 (a copy or download that "
                                        "did not finish?)"));
  }
  // A header alone that claims 20000 x 14000 pixels: 280 M values even in grey, over the
  // 2^28 bound. Stored top-down, its height is negative, and so was the count checked.
  write_bmp(tmp_path("huge.bmp"), 20000, 14000, true, {});
  REQUIRE_THROWS_WITH(load_image(tmp_path("huge.bmp"), 1),
                      Catch::Contains("huge.bmp claims 20000x14000 pixels x 1 channel(s) = 280000000 values"));
  REQUIRE_THROWS_WITH(load_image(tmp_path("huge.bmp"), 3), Catch::Contains("values; images over 268435456"));
}

// A JPEG's DHT segment holding one table whose 16 code counts add up to `codes` (each count
// at most 255), and the symbols after them.
static std::string dht_segment(int codes) {
  std::string counts(16, '\0'), seg = "\xFF\xC4";
  for (int i = 15, left = codes; i >= 0 && left > 0; --i) counts[size_t(i)] = char(std::min(left, 255)), left -= 255;
  const int length = 2 + 1 + 16 + codes;
  seg += char(length >> 8), seg += char(length);
  seg += '\x10';  // an AC table, slot 0
  return seg + counts + std::string(size_t(codes), '\x07');
}

TEST_CASE("a JPEG whose Huffman table declares more than 256 codes is refused before stb reads it") {
  // A real one first: 16 x 8 pixels of one grey, written by stb_image_write, loads.
  std::vector<uint8_t> grey(16 * 8, 128);
  std::string jpeg;
  stbi_write_jpg_to_func(
      [](void* out, void* data, int size) { static_cast<std::string*>(out)->append(static_cast<char*>(data), size); },
      &jpeg, 16, 8, 1, grey.data(), 90);
  REQUIRE(jpeg.size() > 4);
  write_bytes(tmp_path("ok.jpg"), jpeg);
  const Tensor img = load_image(tmp_path("ok.jpg"), 1);  // stb writes it as colour
  REQUIRE(img.shape() == Shape{1, 8, 16});
  CHECK(max(abs(img - 128.0 / 255)).item() < 3.0 / 255);
  // stb fills arrays of 257 code sizes and 256 symbols from the counts without checking
  // their sum: 272 codes wrote past both (UBSan: "index 257 out of bounds for type
  // 'stbi_uc[257]'"). 256 is a full table, and stb's own checks take it from there.
  const std::string soi = "\xFF\xD8", eoi = "\xFF\xD9";
  for (int codes : {257, 272, 16 * 255}) {
    INFO(codes << " codes");
    const std::string table = dht_segment(codes);
    write_bytes(tmp_path("dht.jpg"), soi + table + eoi);
    REQUIRE_THROWS_WITH(
        load_image(tmp_path("dht.jpg")),
        Catch::Contains("dht.jpg is a corrupt JPEG: a Huffman table at byte 6 declares " + std::to_string(codes) +
                        " codes, where a table holds at most 256 (one per byte value)"));
    // stb takes 0xFF fill bytes before the start marker, and reads a table that comes after
    // the image's scan (as a progressive JPEG's do): both are looked at.
    write_bytes(tmp_path("dht.jpg"), "\xFF\xFF\xFF" + soi + table + eoi);
    REQUIRE_THROWS_WITH(load_image(tmp_path("dht.jpg")), Catch::Contains("table at byte 9 declares"));
    write_bytes(tmp_path("late.jpg"), jpeg.substr(0, jpeg.size() - 2) + table + eoi);
    REQUIRE_THROWS_WITH(load_image(tmp_path("late.jpg")),
                        Catch::Contains("late.jpg is a corrupt JPEG: a Huffman table at byte " +
                                        std::to_string(jpeg.size() + 2) + " declares"));
  }
  write_bytes(tmp_path("full.jpg"), soi + dht_segment(256));
  REQUIRE_THROWS_WITH(load_image(tmp_path("full.jpg")), !Catch::Contains("Huffman table"));
}

TEST_CASE("ImageFolder takes image files only, and refuses a class without one") {
  namespace fs = std::filesystem;
  const fs::path root = tmp_path("folder");
  fs::remove_all(root);
  fs::create_directories(root / "cat");
  fs::create_directories(root / "dog");
  save_png((root / "cat" / "a.png").string(), full({1, 4, 5}, 0.5));
  save_png((root / "dog" / "b.PNG").string(), full({1, 4, 5}, 0.25));
  std::ofstream((root / "cat" / "README.txt").string()) << "notes";
  std::ofstream((root / "dog" / ".DS_Store").string()) << "x";
  ImageFolder ds(root.string());
  REQUIRE(ds.size() == 2);
  CHECK(ds.path(0) == (root / "cat" / "a.png").string());
  CHECK(ds.path(1) == (root / "dog" / "b.PNG").string());
  DataLoader loader(std::make_shared<ImageFolder>(root.string()), {.batch_size = 2});
  for (const Example& b : loader) CHECK(b.input.shape() == Shape{2, 1, 4, 5});
  // A class subfolder with no image would own a label no example carries.
  fs::create_directories(root / "empty");
  std::ofstream((root / "empty" / "notes.txt").string()) << "none here";
  REQUIRE_THROWS_WITH(ImageFolder(root.string()),
                      Catch::Contains("[ImageFolder] " + (root / "empty").string() + " holds no image"));
  fs::remove_all(root / "empty");
  REQUIRE_THROWS_WITH(ImageFolder(root.string(), {.channels = 5}), Catch::Contains("channels must be 0 to 4, got 5"));
  REQUIRE_THROWS_WITH(ImageFolder(root.string(), {.std = 0}), Catch::Contains("std finite and non-zero"));
}

TEST_CASE("a batch of images of other sizes names both files") {
  namespace fs = std::filesystem;
  const fs::path root = tmp_path("sizes");
  fs::remove_all(root);
  fs::create_directories(root / "a");
  save_png((root / "a" / "1.png").string(), full({1, 4, 5}, 0.5));
  save_png((root / "a" / "2.png").string(), full({1, 6, 5}, 0.5));
  DataLoader loader(std::make_shared<ImageFolder>(root.string()), {.batch_size = 2});
  REQUIRE_THROWS_WITH(*loader.begin(),
                      Catch::Contains((root / "a" / "2.png").string() + " is (1,6,5) (C, H, W) but " +
                                      (root / "a" / "1.png").string() + " in the same batch is (1,4,5)"));
}

TEST_CASE("save_png refuses NaN and empty images, and leaves no file behind when it cannot write") {
  namespace fs = std::filesystem;
  Tensor img = full({1, 2, 3}, 0.5);
  img.data<float>()[4] = std::nanf("");  // row 1, column 1
  REQUIRE_THROWS_WITH(save_png(tmp_path("nan.png"), img),
                      Catch::Contains("nan.png: the image holds NaN (at channel 0, row 1, column 1)"));
  CHECK_FALSE(fs::exists(tmp_path("nan.png")));
  REQUIRE_THROWS_WITH(save_png(tmp_path("empty.png"), zeros({1, 0, 3})), Catch::Contains("0x3 pixels cannot be saved"));
  REQUIRE_THROWS_WITH(save_png(tmp_path("no_dir/x.png"), zeros({1, 2, 2})),
                      Catch::Contains("[save_png] cannot write " + tmp_path("no_dir/x.png") + ": No such file"));
  // A folder where the file should go: the temporary file is removed.
  fs::create_directories(tmp_path("a_folder.png"));
  REQUIRE_THROWS_WITH(save_png(tmp_path("a_folder.png"), zeros({1, 2, 2})), Catch::Contains("a_folder.png"));
  for (const auto& e : fs::directory_iterator(tmp_path("")))
    CHECK(e.path().filename().string().find(".tmp.") == std::string::npos);
  // inf is a value a byte can hold: clamped to white (and -inf to black), as before.
  Tensor bright = full({1, 1, 2}, 0.0);
  bright.data<float>()[0] = INFINITY;
  bright.data<float>()[1] = -INFINITY;
  save_png(tmp_path("inf.png"), bright);
  CHECK(load_image(tmp_path("inf.png")).to_vector<float>() == std::vector<float>{1, 0});
}
