// Fashion-MNIST as installed by tools/setup.sh (Debian's dataset-fashion-mnist).
#include <zlib.h>

#include <cstdlib>
#include <filesystem>

#include "catch2/catch.hpp"
#include "data/fashion_mnist.h"
#include "tensor/cpu_allocator.h"
#include "tensor/ops.h"
#include "tests/testing/memory_use.h"
#include "tests/testing/tmp_path.h"

using namespace engine;
using namespace engine::data;

TEST_CASE("Fashion-MNIST loads with the documented sizes, labels and normalisation") {
  auto train = fashion_mnist(true);
  auto test = fashion_mnist(false, {.flatten = true});
  REQUIRE(train->size() == 60000);
  REQUIRE(test->size() == 10000);
  REQUIRE(train->inputs().shape() == Shape{60000, 1, 28, 28});
  REQUIRE(test->inputs().shape() == Shape{10000, 784});
  REQUIRE(min(train->targets()).item() == 0);
  REQUIRE(max(train->targets()).item() == 9);
  // Balanced: 6000 training images per class.
  for (int c = 0; c < 10; ++c) REQUIRE(sum(eq(train->targets(), scalar_tensor(c, DType::Int64))).item() == 6000);
  // Normalised with the training set's own statistics: mean ~0, std ~1.
  REQUIRE(mean(train->inputs()).item() == Approx(0).margin(0.01));
  REQUIRE(std::sqrt(var(train->inputs()).item()) == Approx(1).margin(0.01));
  auto raw = fashion_mnist(false, {.normalize = false});
  REQUIRE(min(raw->inputs()).item() == 0);
  REQUIRE(max(raw->inputs()).item() == 1);
}

TEST_CASE("normalising the training set takes no whole-set temporaries") {
  // Each rank holds the 188 MB of float32 images for the whole run; a temporary per
  // arithmetic step would add 188 MB more each, kept in the process's heap afterwards.
  cpu_empty_cache();
  REQUIRE(engine::testing::reset_peak_rss());
  const int64_t base_kb = engine::testing::status_kb("VmRSS:");
  auto train = fashion_mnist(true);
  const int64_t grew_kb = engine::testing::status_kb("VmHWM:") - base_kb;
  const int64_t images_kb = train->inputs().numel() * 4 / 1024;
  INFO("peak RSS grew by " << grew_kb << " KB for " << images_kb << " KB of images");
  REQUIRE(grew_kb < 2 * images_kb);  // the images, and the file's bytes while they are read
}

TEST_CASE("a missing Fashion-MNIST folder says how to get it") {
  REQUIRE_THROWS_WITH(fashion_mnist(true, {.root = "/nonexistent/fmnist"}),
                      Catch::Contains("train-images-idx3-ubyte.gz not found in /nonexistent/fmnist") &&
                          Catch::Contains("dataset-fashion-mnist"));
}

namespace {
// A folder with t10k files: `n` images of h x w, and the given labels, gzipped as shipped.
std::string fake_fashion_mnist(const std::string& name, int h, int w, const std::vector<uint8_t>& labels) {
  const std::string dir = engine::testing::tmp_path(name);
  std::filesystem::create_directories(dir);
  const uint8_t n = uint8_t(labels.size());
  std::vector<uint8_t> img = {0, 0, 8, 3, 0, 0, 0, n, 0, 0, 0, uint8_t(h), 0, 0, 0, uint8_t(w)};
  img.resize(img.size() + size_t(n) * h * w, 1);
  std::vector<uint8_t> lab = {0, 0, 8, 1, 0, 0, 0, n};
  lab.insert(lab.end(), labels.begin(), labels.end());
  for (auto [file, bytes] :
       {std::pair{"/t10k-images-idx3-ubyte.gz", img}, std::pair{"/t10k-labels-idx1-ubyte.gz", lab}}) {
    gzFile f = gzopen((dir + file).c_str(), "wb");
    gzwrite(f, bytes.data(), unsigned(bytes.size()));
    gzclose(f);
  }
  return dir;
}
}  // namespace

TEST_CASE("an out-of-range label or a wrong image size names the file and the index") {
  const std::string ok = fake_fashion_mnist("fm_ok", 28, 28, {3, 9, 0});
  REQUIRE(fashion_mnist(false, {.root = ok})->size() == 3);
  const std::string bad_label = fake_fashion_mnist("fm_label", 28, 28, {3, 12, 0});
  REQUIRE_THROWS_WITH(
      fashion_mnist(false, {.root = bad_label}),
      "[FashionMNIST] " + bad_label + "/t10k-labels-idx1-ubyte.gz: label 12 at index 1 is not a class (0 to 9)");
  const std::string bad_size = fake_fashion_mnist("fm_size", 27, 28, {3, 1});
  REQUIRE_THROWS_WITH(
      fashion_mnist(false, {.root = bad_size}),
      Catch::Contains(bad_size + "/t10k-images-idx3-ubyte.gz holds 27x28 images; Fashion-MNIST's are 28x28"));
}
