#include "data/fashion_mnist.h"

#include <cstdlib>
#include <fstream>

#include "data/idx.h"
#include "tensor/ops.h"

namespace engine::data {

const char* const kFashionMnistClasses[10] = {"T-shirt/top", "Trouser", "Pullover", "Dress", "Coat",
                                              "Sandal",      "Shirt",   "Sneaker",  "Bag",   "Ankle boot"};

std::string fashion_mnist_root() {
  const char* env = std::getenv("FASHION_MNIST_DIR");
  return env && *env ? env : "/usr/share/datasets/fashion-mnist";
}

namespace {
std::string require_file(const std::string& root, const std::string& name) {
  const std::string path = root + "/" + name;
  ENGINE_REQUIRE(std::ifstream(path).good(), "[FashionMNIST] ", name, " not found in ", root,
                 ": install Debian's dataset-fashion-mnist (bash tools/setup.sh does), "
                 "or point FASHION_MNIST_DIR at a folder holding the four .gz IDX files");
  return path;
}
}  // namespace

std::shared_ptr<TensorDataset> fashion_mnist(bool train, const FashionMnistOptions& options) {
  const std::string root = options.root.empty() ? fashion_mnist_root() : options.root;
  const std::string prefix = train ? "train" : "t10k";
  Tensor images = read_idx_images(require_file(root, prefix + "-images-idx3-ubyte.gz"));
  Tensor labels = read_idx_labels(require_file(root, prefix + "-labels-idx1-ubyte.gz"));
  ENGINE_REQUIRE(images.size(0) == labels.size(0), "[FashionMNIST] ", root, " has ", images.size(0), " ", prefix,
                 " images but ", labels.size(0), " labels");
  if (options.normalize) images = (images - double(kFashionMnistMean)) / double(kFashionMnistStd);
  images = options.flatten ? images.reshape({images.size(0), -1})
                           : images.reshape({images.size(0), 1, images.size(1), images.size(2)});
  return std::make_shared<TensorDataset>(images, labels);
}

}  // namespace engine::data
