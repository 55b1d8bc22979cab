#include "data/fashion_mnist.h"

#include <cstdlib>
#include <fstream>

#include "data/idx.h"
#include "tensor/input_file.h"
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
  ENGINE_REQUIRE(engine::anything_at(path), "[FashionMNIST] ", name, " not found in ", root,
                 ": install Debian's dataset-fashion-mnist (bash tools/setup.sh does), "
                 "or point FASHION_MNIST_DIR at a folder holding the four .gz IDX files");
  const std::string not_file = engine::not_a_file(path);  // a folder, a FIFO, unreadable
  ENGINE_REQUIRE(not_file.empty(), "[FashionMNIST] cannot read ", path, not_file);
  return path;
}

// x <- (x - mean) / std, in float32 as `(images - mean) / std` computes it, but in place:
// the training images are 188 MB as float32, and the two whole-set temporaries of the
// expression would stay in the process's heap for the rest of the run (every rank's).
void normalize_in_place(Tensor& images) {
  float* p = images.data<float>();
  for (int64_t i = 0; i < images.numel(); ++i) p[i] = (p[i] - kFashionMnistMean) / kFashionMnistStd;
}
}  // namespace

std::shared_ptr<TensorDataset> fashion_mnist(bool train, const FashionMnistOptions& options) {
  const std::string root = options.root.empty() ? fashion_mnist_root() : options.root;
  const std::string prefix = train ? "train" : "t10k";
  const std::string images_path = require_file(root, prefix + "-images-idx3-ubyte.gz");
  const std::string labels_path = require_file(root, prefix + "-labels-idx1-ubyte.gz");
  Tensor images = read_idx_images(images_path);
  Tensor labels = read_idx_labels(labels_path);
  ENGINE_REQUIRE(images.size(1) == 28 && images.size(2) == 28, "[FashionMNIST] ", images_path, " holds ",
                 images.size(1), "x", images.size(2), " images; Fashion-MNIST's are 28x28");
  ENGINE_REQUIRE(images.size(0) == labels.size(0), "[FashionMNIST] ", root, " has ", images.size(0), " ", prefix,
                 " images but ", labels.size(0), " labels");
  const int64_t* label = labels.data<int64_t>();
  for (int64_t i = 0; i < labels.numel(); ++i)
    ENGINE_REQUIRE(label[i] >= 0 && label[i] < 10, "[FashionMNIST] ", labels_path, ": label ", label[i], " at index ",
                   i, " is not a class (0 to 9)");
  if (options.normalize) normalize_in_place(images);
  images = options.flatten ? images.reshape({images.size(0), -1})
                           : images.reshape({images.size(0), 1, images.size(1), images.size(2)});
  return std::make_shared<TensorDataset>(images, labels);
}

}  // namespace engine::data
