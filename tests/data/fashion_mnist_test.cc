// Fashion-MNIST as installed by tools/setup.sh (Debian's dataset-fashion-mnist).
#include <cstdlib>

#include "catch2/catch.hpp"
#include "data/fashion_mnist.h"
#include "tensor/ops.h"

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

TEST_CASE("a missing Fashion-MNIST folder says how to get it") {
  REQUIRE_THROWS_WITH(fashion_mnist(true, {.root = "/nonexistent/fmnist"}),
                      Catch::Contains("train-images-idx3-ubyte.gz not found in /nonexistent/fmnist") &&
                          Catch::Contains("dataset-fashion-mnist"));
}
