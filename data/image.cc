#include "data/image.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <vector>

#include "data/image_checks.h"
#include "stb/stb_image.h"
#include "stb/stb_image_write.h"
#include "tensor/input_file.h"
#include "tensor/new_file.h"
#include "tensor/ops.h"

namespace engine::data {

namespace fs = std::filesystem;

constexpr uintmax_t kMaxImageFileBytes = 256u << 20;
constexpr int64_t kMaxImagePixels = int64_t(1) << 28;  // what save_png writes
// What load_image decodes: at most 2^28 values (pixels x channels), 1 GiB as float32, the
// bytes PIL allows before its decompression-bomb warning (89,478,485 RGB pixels). A PNG of
// a few hundred KB may claim that many pixels of one colour: the claim is checked before
// anything is allocated for them.
constexpr int64_t kMaxImageValues = int64_t(1) << 28;

Tensor load_image(const std::string& path, int channels) {
  ENGINE_REQUIRE(channels >= 0 && channels <= 4, "[load_image] channels must be 0 to 4, got ", channels);
  // Decoded from memory, not from the FILE*: stb skips over a file's bytes one getc at a
  // time, so a few hundred bytes of BMP claiming a 4 GB pixel offset used to keep it busy
  // for minutes; in memory a skip past the end fails at once. The size read is bounded,
  // and so are the dimensions, before anything is allocated for pixels.
  const std::string not_file = engine::not_a_file(path);  // a folder, a FIFO, a device, unreadable
  ENGINE_REQUIRE(not_file.empty(), "[load_image] cannot read ", path, not_file);
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
  check_jpeg_huffman_tables(bytes, path);  // before stb reads a JPEG's header, in its info too
  int w = 0, h = 0, stored = 0;
  ENGINE_REQUIRE(stbi_info_from_memory(bytes.data(), int(bytes.size()), &w, &h, &stored), "[load_image] cannot decode ",
                 path, ": ", stbi_failure_reason());
  // stb's info gives a top-down BMP's height as it is stored, negative (the decoder takes
  // its size): a negative count would pass the bound below.
  const int64_t width = std::abs(int64_t(w)), height = std::abs(int64_t(h));
  const int c = channels ? channels : stored;  // the channels decoded
  const int64_t values = width * height * c;
  ENGINE_REQUIRE(values <= kMaxImageValues, "[load_image] ", path, " claims ", width, "x", height, " pixels x ", c,
                 " channel(s) = ", values, " values; images over ", kMaxImageValues,
                 " values (1 GiB as float32) are refused");
  check_bmp_holds_its_pixels(bytes, path);
  // Asked for c channels even when c is the file's own count: a grey or RGB PNG with a
  // transparent colour (tRNS) is otherwise decoded with an alpha channel more than stb
  // reports. Its own count, as PIL's mode "L" or "RGB", keeps the pixels and drops that alpha.
  std::unique_ptr<stbi_uc, void (*)(void*)> pixels(
      stbi_load_from_memory(bytes.data(), int(bytes.size()), &w, &h, &stored, c), stbi_image_free);
  ENGINE_REQUIRE(pixels != nullptr, "[load_image] cannot decode ", path, ": ", stbi_failure_reason());
  // stb gives interleaved (H, W, C) bytes; we return planar (C, H, W) floats.
  Tensor out = empty({c, h, w});
  float* o = out.data<float>();
  const stbi_uc* p = pixels.get();
  for (int ch = 0; ch < c; ++ch)
    for (int64_t i = 0; i < int64_t(h) * w; ++i) o[ch * int64_t(h) * w + i] = p[i * c + ch] * (1.0f / 255.0f);
  return out;
}

// Where stb's PNG encoder hands its bytes: a file descriptor, and the first write error.
struct FdSink {
  int fd = -1;
  int err = 0;
};

static void write_to_fd(void* context, void* data, int size) {
  auto* sink = static_cast<FdSink*>(context);
  if (sink->err == 0 && !write_all(sink->fd, data, size_t(size))) sink->err = errno;
}

void save_png(const std::string& path, const Tensor& image) {
  ENGINE_REQUIRE(image.dim() == 2 || image.dim() == 3, "[save_png] expects (C, H, W) or (H, W), got shape ",
                 shape_str(image.shape()));
  const Tensor chw = image.dim() == 2 ? image.unsqueeze(0) : image;
  ENGINE_REQUIRE(chw.size(0) >= 1 && chw.size(0) <= 4, "[save_png] needs 1 to 4 channels, got ", chw.size(0));
  // A PNG holds at least one pixel, and at most 2^31 - 1 along each side.
  ENGINE_REQUIRE(chw.size(1) >= 1 && chw.size(2) >= 1 && chw.size(1) * chw.size(2) <= kMaxImagePixels, "[save_png] ",
                 path, ": an image of ", chw.size(1), "x", chw.size(2), " pixels cannot be saved (1 to ",
                 kMaxImagePixels, " pixels)");
  // The PNG is renamed onto the name: a device there (/dev/null) would be replaced.
  const std::string special = special_file_at(path);
  ENGINE_REQUIRE(special.empty(), "[save_png] cannot write ", path, ": it is ", special,
                 ", not a file, and a save would put a file in its place");
  const int c = int(chw.size(0)), h = int(chw.size(1)), w = int(chw.size(2));
  // Back to interleaved bytes, rounding and clamping to [0, 255]. NaN has no byte: a model's
  // output that became NaN is named here rather than saved as black.
  const Tensor hwc = clamp(chw.to(DType::Float32).permute({1, 2, 0}) * 255.0 + 0.5, 0, 255).contiguous();
  std::vector<unsigned char> bytes(size_t(hwc.numel()));
  const float* p = hwc.data<float>();
  for (size_t i = 0; i < bytes.size(); ++i) {
    ENGINE_REQUIRE(!std::isnan(p[i]), "[save_png] ", path, ": the image holds NaN (at channel ", i % size_t(c),
                   ", row ", i / size_t(c) / size_t(w), ", column ", i / size_t(c) % size_t(w), ")");
    bytes[i] = static_cast<unsigned char>(p[i]);
  }
  // Written beside the target and renamed into place, so that a reader never sees half a
  // file; the process id keeps two writers of one path apart, and the temporary is made new
  // (never written through a link put at its predictable name).
  const std::string tmp = leave_room(path, 15) + ".tmp." + std::to_string(::getpid());
  FdSink sink{create_new_file(tmp), 0};
  if (sink.fd < 0) sink.err = errno;
  const bool encoded = sink.fd >= 0 && stbi_write_png_to_func(write_to_fd, &sink, w, h, c, bytes.data(), w * c) != 0;
  if (sink.fd >= 0) ::close(sink.fd);
  if (encoded && sink.err == 0 && std::rename(tmp.c_str(), path.c_str()) == 0) return;
  const int why = encoded && sink.err == 0 ? errno : sink.err;
  if (sink.fd >= 0) std::remove(tmp.c_str());
  ENGINE_REQUIRE(false, "[save_png] cannot write ", path, ": ",
                 why ? write_error_words(why) : "the PNG encoder failed");
}

// The files ImageFolder takes as images, by extension (any case), as torchvision's: other
// files (a README, .DS_Store) are skipped instead of failing the first batch they land in.
static bool is_image_file(const fs::path& p) {
  std::string ext = p.extension().string();
  std::transform(ext.begin(), ext.end(), ext.begin(), [](unsigned char ch) { return char(std::tolower(ch)); });
  return ext == ".png" || ext == ".jpg" || ext == ".jpeg" || ext == ".bmp";
}

ImageFolder::ImageFolder(const std::string& root, ImageFolderOptions options) : options_(options) {
  ENGINE_REQUIRE(options.channels >= 0 && options.channels <= 4, "[ImageFolder] channels must be 0 to 4, got ",
                 options.channels);
  ENGINE_REQUIRE(std::isfinite(options.mean) && std::isfinite(options.std) && options.std != 0,
                 "[ImageFolder] mean must be finite and std finite and non-zero, got mean ", options.mean, ", std ",
                 options.std);
  std::error_code ec;
  ENGINE_REQUIRE(fs::is_directory(root, ec), "[ImageFolder] ", root, " is not a directory");
  fs::directory_iterator it(root, ec);
  ENGINE_REQUIRE(!ec, "[ImageFolder] cannot list ", root, ": ", ec.message());
  for (const auto& entry : it)
    if (entry.is_directory(ec)) classes_.push_back(entry.path().filename().string());
  std::sort(classes_.begin(), classes_.end());
  ENGINE_REQUIRE(!classes_.empty(), "[ImageFolder] ", root, " has no class subfolders (expected root/<class>/<image>)");
  for (size_t label = 0; label < classes_.size(); ++label) {
    const fs::path dir = fs::path(root) / classes_[label];
    std::vector<std::string> files;
    fs::directory_iterator in(dir, ec);
    ENGINE_REQUIRE(!ec, "[ImageFolder] cannot list ", dir.string(), ": ", ec.message());
    for (const auto& entry : in)
      if (entry.is_regular_file(ec) && is_image_file(entry.path())) files.push_back(entry.path().string());
    // A class without images would still take a label that no example carries.
    ENGINE_REQUIRE(!files.empty(), "[ImageFolder] ", dir.string(),
                   " holds no image (.png, .jpg, .jpeg or .bmp): every class subfolder needs at least one");
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

Example ImageFolder::get_batch(const std::vector<int64_t>& indices) const {
  if (indices.empty()) return {stack({}), stack({})};  // stack names what is wrong
  // Each image is copied into its row of the batch as soon as it is decoded: one image and
  // the batch in memory at a time, not every image and then the batch.
  Tensor batch;
  std::vector<Tensor> targets;
  for (size_t k = 0; k < indices.size(); ++k) {
    Example e = get(indices[k]);
    if (k == 0) {
      Shape shape = e.input.shape();
      shape.insert(shape.begin(), int64_t(indices.size()));
      batch = empty(shape, e.input.dtype());
    }
    // Images of other sizes cannot be stacked: name both files, not just their shapes.
    const Tensor first = batch.select(0, 0);
    ENGINE_REQUIRE(e.input.shape() == first.shape(), "[ImageFolder] ", path(indices[k]), " is ",
                   shape_str(e.input.shape()), " (C, H, W) but ", path(indices[0]), " in the same batch is ",
                   shape_str(first.shape()),
                   ": a batch needs images of one size (resize them first, or use batch "
                   "size 1)");
    batch.select(0, int64_t(k)).copy_(e.input);
    targets.push_back(e.target);
  }
  return {batch, stack(targets)};
}

}  // namespace engine::data
