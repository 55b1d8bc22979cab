// Images through stb_image: PNG, JPEG and BMP decoded into float tensors (other formats are
// refused: fewer decoders, less untrusted code), and an ImageFolder dataset with one subfolder
// per class (as torchvision's).
//
//   Tensor img = load_image("shoe.png", 1);         // (1, H, W) grey, values in [0, 1]
//   save_png("copy.png", img);
//   ImageFolder ds("photos/", {.channels = 3});      // photos/cat/*.png -> class 0 ("cat"), ...
//   Example e = ds.get(0);                           // e.input (3, H, W), e.target int64 scalar
//
// A missing, corrupt, truncated or non-image file throws engine::Error naming the file and
// stb's reason. ImageFolder takes only files named .png, .jpg, .jpeg or .bmp (any case), and
// refuses a class subfolder with none.
#pragma once

#include <string>
#include <vector>

#include "data/dataset.h"

namespace engine::data {

// Decodes `path` into float32 (C, H, W) in [0, 1]. channels: 0 keeps the file's own count,
// 1 converts to grey, 3 to RGB, 4 to RGBA.
Tensor load_image(const std::string& path, int channels = 0);

// Writes a (C, H, W) or (H, W) float tensor with values in [0, 1] as a PNG (atomically:
// a temporary file renamed into place).
void save_png(const std::string& path, const Tensor& image);

struct ImageFolderOptions {
  int channels = 0;
  float mean = 0, std = 1;  // applied as (x - mean) / std after scaling to [0, 1]
};

class ImageFolder : public Dataset {
 public:
  explicit ImageFolder(const std::string& root, ImageFolderOptions options = {});
  int64_t size() const override { return int64_t(files_.size()); }
  Example get(int64_t i) const override;  // decodes the image on each call
  // Stacks the images; images of other sizes are refused, naming both files.
  Example get_batch(const std::vector<int64_t>& indices) const override;
  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t i) const { return files_.at(size_t(i)); }

 private:
  std::vector<std::string> classes_;  // sorted subfolder names; the index is the label
  std::vector<std::string> files_;    // sorted within each class
  std::vector<int64_t> labels_;
  ImageFolderOptions options_;
};

}  // namespace engine::data
