// Fashion-MNIST: 70,000 28x28 grey images of clothing in 10 classes (60,000 train, 10,000
// test; Expat licence), as Debian's dataset-fashion-mnist installs it.
//
//   auto train = fashion_mnist(/*train=*/true);   // inputs (60000, 1, 28, 28), targets int64
//   auto test = fashion_mnist(false, {.flatten = true});  // inputs (10000, 784)
//
// Pixels are scaled to [0, 1] and normalised with the training set's mean and std
// (0.2860, 0.3530). The folder is FASHION_MNIST_DIR if set, else
// /usr/share/datasets/fashion-mnist; a missing file is an error that says how to get it.
#pragma once

#include <memory>
#include <string>

#include "data/dataset.h"

namespace engine::data {

extern const char* const kFashionMnistClasses[10];
constexpr float kFashionMnistMean = 0.2860f, kFashionMnistStd = 0.3530f;

struct FashionMnistOptions {
  bool flatten = false;   // (N, 784) instead of (N, 1, 28, 28)
  bool normalize = true;  // (x - mean) / std; otherwise plain [0, 1]
  std::string root = "";  // default: $FASHION_MNIST_DIR or /usr/share/datasets/fashion-mnist
};

std::shared_ptr<TensorDataset> fashion_mnist(bool train, const FashionMnistOptions& options = {});

// The folder fashion_mnist() reads when options.root is empty.
std::string fashion_mnist_root();

}  // namespace engine::data
