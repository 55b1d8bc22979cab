#include "data/image.h"

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <vector>

#include "stb/stb_image.h"
#include "stb/stb_image_write.h"
#include "tensor/ops.h"

namespace engine::data {

namespace fs = std::filesystem;

constexpr uintmax_t kMaxImageFileBytes = 256u << 20;
constexpr int64_t kMaxImagePixels = int64_t(1) << 28;

Tensor load_image(const std::string& path, int channels) {
  ENGINE_REQUIRE(channels >= 0 && channels <= 4, "[load_image] channels must be 0 to 4, got ", channels);
  // Decoded from memory, not from the FILE*: stb skips over a file's bytes one getc at a
  // time, so a few hundred bytes of BMP claiming a 4 GB pixel offset used to keep it busy
  // for minutes; in memory a skip past the end fails at once. The size read is bounded,
  // and so are the dimensions, before anything is allocated for pixels.
  std::error_code ec;
  const uintmax_t size = fs::file_size(path, ec);
  ENGINE_REQUIRE(!ec, "[load_image] cannot read ", path, ": ", ec.message());
  ENGINE_REQUIRE(size <= kMaxImageFileBytes, "[load_image] ", path, " is ", size, " bytes; images over ",
                 kMaxImageFileBytes, " bytes are refused");
  std::vector<stbi_uc> bytes(static_cast<size_t>(size));
  {
    std::unique_ptr<FILE, int (*)(FILE*)> f(std::fopen(path.c_str(), "rb"), std::fclose);
    ENGINE_REQUIRE(f != nullptr, "[load_image] cannot open ", path);
    ENGINE_REQUIRE(std::fread(bytes.data(), 1, bytes.size(), f.get()) == bytes.size(), "[load_image] cannot read ",
                   path);
  }
  int w = 0, h = 0, stored = 0;
  ENGINE_REQUIRE(stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &stored), "[load_image] cannot decode ",
                 path, ": ", stbi_failure_reason());
  ENGINE_REQUIRE(int64_t(w) * h <= kMaxImagePixels, "[load_image] ", path, " claims ", w, "x", h,
                 " pixels; images over ", kMaxImagePixels, " pixels are refused");
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &stored, channels), stbi_image_free);
  ENGINE_REQUIRE(pixels != nullptr, "[load_image] cannot decode ", path, ": ", stbi_failure_reason());
  const int c = channels ? channels : stored;
  // stb gives interleaved (H, W, C) bytes; we return planar (C, H, W) floats.
  Tensor out = empty({c, h, w});
  float* o = out.data<float>();
  const stbi_uc* p = pixels.get();
  for (int ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < int64_t(h) * w; ++i) o[ch * int64_t(h) * w + i] = p[i * c + ch] * (1.0f / 255.0f);
  return out;
}

void save_png(const std::string& path, const Tensor& image) {
  ENGINE_REQUIRE(image.dim() == 2 || image.dim() == 3, "[save_png] expects (C, H, W) or (H, W), got shape ",
                 shape_str(image.shape()));
  const Tensor chw = image.dim() == 2 ? image.unsqueeze(0) : image;
  const int c = int(chw.size(0)), h = int(chw.size(1)), w = int(chw.size(2));
  ENGINE_REQUIRE(c >= 1 && c <= 4, "[save_png] needs 1 to 4 channels, got ", c);
  // Back to interleaved bytes, rounding and clamping to [0, 255].
  const Tensor hwc = clamp(chw.permute({1, 2, 0}) * 255.0 + 0.5, 0, 255).contiguous();
  std::vector<unsigned char> bytes(size_t(hwc.numel()));
  const float* p = hwc.data<float>();
  for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = static_cast<unsigned char>(p[i]);
  const std::string tmp = path + ".tmp";
  ENGINE_REQUIRE(stbi_write_png(tmp.c_str(), w, h, c, bytes.data(), w * c) != 0, "[save_png] cannot write ", tmp);
  ENGINE_REQUIRE(std::rename(tmp.c_str(), path.c_str()) == 0, "[save_png] cannot rename ", tmp, " to ", path);
}

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options) : options_(options) {
  std::error_code ec;
  ENGINE_REQUIRE(fs::is_directory(root, ec), "[ImageFolder] ", root, " is not a directory");
  for (const auto& entry : fs::directory_iterator(root))
    if (entry.is_directory()) classes_.push_back(entry.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  ENGINE_REQUIRE(!classes_.empty(), "[ImageFolder] ", root, " has no class subfolders (expected root/<class>/<image>)");
  for (size_t label = 0; label < classes_.size(); ++label) {
    std::vector<std::string> files;
    for (const auto& entry : fs::directory_iterator(fs::path(root) / classes_[label]))
      if (entry.is_regular_file()) files.push_back(entry.path().string());
    std::sort(files.begin(), files.end());
    for (auto& f : files) {
      files_.push_back(f);
      labels_.push_back(int64_t(label));
    }
  }
}

Example ImageFolder::get(int64_t i) const {
  ENGINE_REQUIRE(i >= 0 && i < size(), "[ImageFolder] index ", i, " is out of range for ", size(), " images");
  Tensor img = load_image(files_[size_t(i)], options_.channels);
  if (options_.mean != 0 || options_.std != 1) img = (img - double(options_.mean)) / double(options_.std);
  return {img, scalar_tensor(double(labels_[size_t(i)]), DType::Int64)};
}

}  // namespace engine::data
