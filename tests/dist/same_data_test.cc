// The check that every rank reads the same dataset (dist/same_data.h): a copy of the files
// with a few labels changed, or a shorter one, is named on every rank with its own count
// and fingerprint; equal copies pass. The fingerprint tells apart what differs by a byte,
// a shape or a dtype.
#include "dist/same_data.h"

#include "catch2/catch.hpp"
#include "tensor/ops.h"
#include "tests/dist/ranks.h"
#include "tests/rank_assert.h"

using namespace engine;
using namespace engine::dist;
using engine::testing::run_threads;

namespace {
// A small dataset as a rank would load it: images 0..n-1 scaled, labels i mod 10.
std::pair<Tensor, Tensor> dataset(int64_t n) {
  std::vector<float> images(size_t(n) * 4);
  std::vector<int64_t> labels(static_cast<size_t>(n));
  for (size_t i = 0; i < images.size(); ++i) images[i] = float(i) / 7.0f;
  for (int64_t i = 0; i < n; ++i) labels[size_t(i)] = i % 10;
  return {from_vector(images).reshape({n, 4}), from_vector(labels)};
}
}  // namespace

TEST_CASE("the fingerprint changes with one byte, the shape or the dtype, and not with a copy") {
  auto [x, y] = dataset(100);
  const uint64_t h = fingerprint(x);
  CHECK(fingerprint(x.clone()) == h);
  CHECK(fingerprint(x.reshape({50, 8})) != h);
  CHECK(fingerprint(x.narrow(0, 0, 99)) != h);
  Tensor changed = x.clone();
  changed.data<float>()[399] = 1e9f;  // the very last element
  CHECK(fingerprint(changed) != h);
  // 12 bytes: the last 4 are not a whole word, and are hashed too.
  CHECK(fingerprint(from_vector(std::vector<float>{1, 2, 3})) != fingerprint(from_vector(std::vector<float>{1, 2, 4})));
  CHECK(fingerprint(y) != fingerprint(y.to(DType::Float32)));
  CHECK(fingerprint(x.narrow(0, 10, 20)) == fingerprint(x.narrow(0, 10, 20).clone()));  // a view: its own bytes
}

TEST_CASE("a rank whose copy of the data differs is named on every rank; equal copies pass") {
  enum Copy { kSame, kLabels, kShorter };
  for (const Copy copy : {kSame, kLabels, kShorter}) {
    std::vector<std::string> said(3);
    run_threads(3, [&](ProcessGroupTCP& g) {
      auto [x, y] = dataset(g.rank() == 2 && copy == kShorter ? 90 : 100);
      if (g.rank() == 2 && copy == kLabels) y.data<int64_t>()[50] = 3;  // one label of a hundred
      try {
        require_same_data(g, x, y, "[test] the training set");
        said[size_t(g.rank())] = "passed";
      } catch (const Error& e) {
        said[size_t(g.rank())] = e.what();
      }
    });
    for (int r = 0; r < 3; ++r) {
      INFO("copy " << int(copy) << ", rank " << r);
      if (copy == kSame) {
        RANK_REQUIRE(said[size_t(r)] == "passed");
        continue;
      }
      RANK_REQUIRE_THAT(
          said[size_t(r)],
          Catch::StartsWith("[test] the training set differs between the ranks: rank " + std::to_string(r) + " has " +
                            (r == 2 && copy == kShorter ? "90" : "100") + " samples, fingerprint 0x") &&
              Catch::Contains(copy == kShorter ? "(sample counts range over 90..100)"
                                               : "(the same count on every rank, other contents)"));
    }
  }
}
