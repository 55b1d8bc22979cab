#include "nn/safetensors.h"

#include <fcntl.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <vector>

#include "nlohmann/json.hpp"
#include "nn/crc32c.h"
#include "tensor/input_file.h"
#include "tensor/new_file.h"

namespace engine::nn {
namespace {

using json = nlohmann::ordered_json;  // keys in the file's order, so the header can be dumped as written

// The format's names for our dtypes (safetensors also has F64, I32, U8, ... which we do not hold).
const char* dtype_code(DType t) {
  switch (t) {
    case DType::Float32: return "F32";
    case DType::Int64: return "I64";
    case DType::BFloat16: return "BF16";
    default: return "F16";
  }
}

// ---------------------------------------------------------------------------------------
// Writing

// "1a2b3c4d": a checksum as the file keeps it.
std::string hex32(uint32_t v) {
  char buf[9];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// The header: metadata first (with the checksums: see safetensors.h), then each tensor's
// entry, in the order written.
std::string build_header(const StateDict& tensors, const Metadata& metadata, std::vector<Tensor>* dense) {
  ENGINE_REQUIRE(!metadata.count(kChecksumKey), "[save_safetensors] metadata key \"", kChecksumKey,
                 "\" is the file's own checksum, which save_safetensors writes: choose another name");
  json h = json::object();  // keys in the order written, as Python's writer
  h["__metadata__"] = json::object();
  for (const auto& [k, v] : metadata) h["__metadata__"][k] = v;
  uint64_t offset = 0;
  std::string sums;
  for (const auto& [name, t] : tensors) {
    ENGINE_REQUIRE(t.defined(), "[save_safetensors] tensor \"", name, "\" is undefined");
    ENGINE_REQUIRE(name != "__metadata__" && !name.empty(), "[save_safetensors] invalid tensor name \"", name, "\"");
    const Tensor c = t.to(Device::cpu()).contiguous();
    const uint64_t bytes = uint64_t(c.numel()) * dtype_size(c.dtype());
    h[name] = {{"dtype", dtype_code(c.dtype())}, {"shape", c.shape()}, {"data_offsets", {offset, offset + bytes}}};
    sums += " " + hex32(crc32c(c.bytes(), size_t(bytes)));
    offset += bytes;
    dense->push_back(c);
  }
  std::string header;
  try {
    header = h.dump();  // the header's checksum is of this text, without the checksums
    h["__metadata__"][kChecksumKey] = hex32(crc32c(header.data(), header.size())) + sums;
    header = h.dump();
  } catch (const json::exception&) {  // JSON strings are UTF-8: a name or value that is not cannot be saved
    throw Error("[save_safetensors] a tensor name or metadata text is not valid UTF-8");
  }
  header.append((8 - header.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  return header;
}

// Who writes a temporary, as its name says it: "HOST-NS", this machine's name (its first 32
// characters; letters and digits, others as '-') and pid namespace; the pid follows. On a
// file system that machines or containers share (NFS), a pid means something only to the
// writers that see the same pids, and two writers elsewhere may have one pid: with the tag
// their temporaries differ, and a writer judges only its own kind's (remove_stale_temporaries).
std::string writer_tag() {
  char host[256] = {};
  ::gethostname(host, sizeof host - 1);
  std::string tag;
  for (const char* c = host; *c && tag.size() < 32; ++c) tag += std::isalnum(static_cast<unsigned char>(*c)) ? *c : '-';
  tag += '-';
  char ns[64] = {};  // "pid:[4026531836]"
  if (::readlink("/proc/self/ns/pid", ns, sizeof ns - 1) > 0)
    for (const char* c = ns; *c; ++c)
      if (std::isdigit(static_cast<unsigned char>(*c))) tag += *c;
  return tag;
}

// Removes "<stem>.tmp.<tag>.<pid>" files left by writers of this tag that were killed
// mid-save (their pid no longer exists), so that interrupted saves do not pile up next to
// the checkpoint. Another tag's are another machine's: whether their writer lives cannot be
// told from here, so they are left alone. The stem is the checkpoint's path, cut short
// where it leaves no room for the rest (leave_room).
void remove_stale_temporaries(const std::string& stem, const std::string& tag) {
  namespace fs = std::filesystem;
  const fs::path target(stem);
  const fs::path dir = target.has_parent_path() ? target.parent_path() : fs::path(".");
  const std::string prefix = target.filename().string() + ".tmp." + tag + ".";
  std::error_code ec;
  for (fs::directory_iterator it(dir, ec), end; !ec && it != end; it.increment(ec)) {
    const std::string name = it->path().filename().string();
    if (name.rfind(prefix, 0) != 0) continue;
    const std::string pid = name.substr(prefix.size());
    if (pid.empty() || pid.find_first_not_of("0123456789") != std::string::npos || pid.size() > 9) continue;
    if (::kill(pid_t(std::stol(pid)), 0) != 0 && errno == ESRCH) fs::remove(it->path(), ec);
  }
}

}  // namespace

void save_safetensors(const std::string& path, const StateDict& tensors, const Metadata& metadata) {
  static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "safetensors data is little-endian");
  check_save_path(path);  // an empty path or a folder named before anything is written
  std::vector<Tensor> dense;
  const std::string header = build_header(tensors, metadata, &dense);
  const std::string tag = writer_tag();
  // ".tmp.TAG.PID" after the name, a pid of up to 10 digits: a long name is cut to fit.
  const std::string stem = leave_room(path, 5 + tag.size() + 1 + 10);
  remove_stale_temporaries(stem, tag);
  // Temporary file in the target's directory, so the final rename stays on one file system.
  const std::string tmp = stem + ".tmp." + tag + "." + std::to_string(::getpid());
  const int fd = create_new_file(tmp);  // never through a link put at this predictable name
  ENGINE_REQUIRE(fd >= 0, "[save_safetensors] cannot create ", tmp, ": ", std::strerror(errno));
  const uint64_t n = header.size();
  uint8_t len[8];
  for (int i = 0; i < 8; ++i) len[i] = uint8_t(n >> (8 * i));
  bool ok = write_all(fd, len, 8) && write_all(fd, header.data(), header.size());
  for (const Tensor& t : dense) {
    if (!ok) break;
    const char* base = t.bytes();
    ok = write_all(fd, base, size_t(t.numel()) * dtype_size(t.dtype()));
  }
  const int saved_errno = errno;
  ok = ok && ::fsync(fd) == 0;  // the bytes are on disk before the name points at them
  ::close(fd);
  if (!ok) {
    ::unlink(tmp.c_str());
    throw Error("[save_safetensors] writing " + tmp + " failed: " +
                write_error_words(saved_errno ? saved_errno : errno) + "; " + path + " was left as it was");
  }
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    ::unlink(tmp.c_str());
    throw Error("[save_safetensors] cannot rename " + tmp + " to " + path + ": " + why);
  }
  // Make the rename itself durable.
  const size_t slash = path.find_last_of('/');
  const std::string dir = slash == std::string::npos ? "." : path.substr(0, slash + 1);
  const int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) ::fsync(dfd), ::close(dfd);
}

namespace {

struct Entry {
  std::string name;
  DType dtype;
  Shape shape;
  uint64_t begin, end;  // within the data section
};

// The header's JSON, nested at most 16 deep (the format needs 3), so hostile input cannot
// build a huge tree; a parse error names the byte.
json parse_header(const std::string& header, const std::string& path) {
  auto limit_depth = [&](int depth, json::parse_event_t, json&) {
    if (depth > 16) throw Error("[load_safetensors] " + path + ": malformed header: nested too deeply");
    return true;
  };
  try {
    json root = json::parse(header, limit_depth);
    ENGINE_REQUIRE(root.is_object(), "[load_safetensors] ", path, ": the header is not a JSON object");
    return root;
  } catch (const json::parse_error& e) {
    throw Error("[load_safetensors] " + path + ": malformed header at byte " + std::to_string(e.byte) + ": " +
                e.what());
  } catch (const json::exception& e) {  // e.g. a number too large for any type (1e999)
    throw Error("[load_safetensors] " + path + ": malformed header: " + e.what());
  }
}

// A size or an offset: an integer in [0, limit].
bool small_integer(const json& v, uint64_t limit, uint64_t* out) {
  if (v.is_number_unsigned())
    *out = v.get<uint64_t>();
  else if (v.is_number_integer() && v.get<int64_t>() >= 0)
    *out = uint64_t(v.get<int64_t>());
  else
    return false;
  return *out <= limit;
}

// One tensor's entry, checked against the data section's size.
Entry parse_entry(const std::string& name, const json& v, uint64_t data_size, const std::string& path) {
  auto bad = [&](const std::string& what) {
    return Error("[load_safetensors] " + path + ": tensor \"" + name + "\": " + what);
  };
  if (!v.is_object()) throw bad("entry is not an object");
  if (!v.contains("dtype") || !v.contains("shape") || !v.contains("data_offsets"))
    throw bad("needs dtype, shape and data_offsets");
  const json &dtype = v["dtype"], &shape = v["shape"], &offsets = v["data_offsets"];
  Entry e{name, DType::Float32, {}, 0, 0};
  if (!dtype.is_string()) throw bad("dtype is not a string");
  const std::string code = dtype.get<std::string>();
  if (code == "F32")
    e.dtype = DType::Float32;
  else if (code == "I64")
    e.dtype = DType::Int64;
  else if (code == "BF16")
    e.dtype = DType::BFloat16;
  else if (code == "F16")
    e.dtype = DType::Float16;
  else
    throw bad("dtype " + code + " is not supported (F32, I64, BF16 and F16 are)");
  if (!shape.is_array() || shape.size() > 8) throw bad("shape must be an array of at most 8 sizes");
  constexpr uint64_t kMaxCount = uint64_t(1) << 40;
  uint64_t count = 1, d = 0;
  for (const json& size : shape) {
    if (!small_integer(size, kMaxCount, &d)) throw bad("shape has an invalid size");
    e.shape.push_back(int64_t(d));
    count *= d;
    if (count > kMaxCount) throw bad("shape is implausibly large");
  }
  if (!offsets.is_array() || offsets.size() != 2 || !small_integer(offsets[0], UINT64_MAX, &e.begin) ||
      !small_integer(offsets[1], UINT64_MAX, &e.end) || e.end < e.begin)
    throw bad("data_offsets must be [begin, end] with 0 <= begin <= end");
  if (e.end > data_size)
    throw bad("data_offsets [" + std::to_string(e.begin) + ", " + std::to_string(e.end) + ") run past the " +
              std::to_string(data_size) + "-byte data section (truncated file?)");
  if (e.end - e.begin != count * dtype_size(e.dtype))
    throw bad("shape " + shape_str(e.shape) + " needs " + std::to_string(count * dtype_size(e.dtype)) +
              " bytes but data_offsets span " + std::to_string(e.end - e.begin));
  return e;
}

// The metadata, less the file's checksums (kChecksumKey), which are returned apart.
void read_metadata(const json& v, const std::string& path, Metadata* metadata, std::string* sums) {
  if (!v.is_object()) throw Error("[load_safetensors] " + path + ": __metadata__ must be an object of strings");
  for (const auto& [k, s] : v.items()) {
    if (!s.is_string())
      throw Error("[load_safetensors] " + path + ": __metadata__ value for \"" + k + "\" is not a string");
    if (k == kChecksumKey)
      *sums = s.get<std::string>();
    else if (metadata)
      (*metadata)[k] = s.get<std::string>();
  }
}

// The checksums as written: the header's, then each tensor's in the order of its bytes,
// each 8 hex digits, separated by spaces.
std::vector<uint32_t> parse_checksums(const std::string& text, size_t tensors, const std::string& path) {
  std::vector<uint32_t> sums;
  size_t i = 0;
  while (i < text.size()) {
    const size_t end = std::min(text.find(' ', i), text.size());
    const std::string word = text.substr(i, end - i);
    ENGINE_REQUIRE(word.size() == 8 && word.find_first_not_of("0123456789abcdef") == std::string::npos,
                   "[load_safetensors] ", path, ": __metadata__ \"", kChecksumKey, "\" holds \"", word.substr(0, 16),
                   "\" where a checksum of 8 hex digits belongs");
    sums.push_back(uint32_t(std::stoul(word, nullptr, 16)));
    i = end + 1;
  }
  ENGINE_REQUIRE(sums.size() == tensors + 1, "[load_safetensors] ", path, ": __metadata__ \"", kChecksumKey,
                 "\" holds ", sums.size(), " checksums, but the file has ", tensors,
                 " tensors (one checksum each, after the header's)");
  return sums;
}

constexpr char kChanged[] =
    ": the file was changed after it was written (a disk fault, a bad copy, or a tool that rewrote it and kept the "
    "old \"engine.crc32c\" metadata entry). Nothing was loaded: use another copy or an earlier checkpoint";

// The header's checksum is of its text as written before the checksums were added to it.
void check_header_checksum(json root, uint32_t expected, const std::string& path) {
  root["__metadata__"].erase(kChecksumKey);
  const std::string text = root.dump();
  ENGINE_REQUIRE(crc32c(text.data(), text.size()) == expected, "[load_safetensors] ", path,
                 ": the header (tensor names, shapes and metadata) does not match the checksum saved with it",
                 kChanged);
}

void check_tensor_checksum(const Entry& e, const Tensor& t, uint32_t expected, const std::string& path) {
  const uint32_t got = crc32c(t.bytes(), size_t(e.end - e.begin));
  ENGINE_REQUIRE(got == expected, "[load_safetensors] ", path, ": tensor \"", e.name,
                 "\" does not match the checksum saved with it (its ", e.end - e.begin, " bytes give ", hex32(got),
                 ", the file says ", hex32(expected), ")", kChanged);
}

// Offsets must tile the data section: in the order the bytes were written (by begin, an
// empty tensor before a full one at the same offset), each starts where the last ended.
void sort_and_check_tiling(std::vector<Entry>& entries, uint64_t data_size, const std::string& path) {
  std::stable_sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  uint64_t expect = 0;
  for (const Entry& e : entries) {
    ENGINE_REQUIRE(e.begin == expect, "[load_safetensors] ", path, ": tensor \"", e.name, "\" at bytes [", e.begin,
                   ", ", e.end, ") ", e.begin < expect ? "overlaps the previous tensor" : "leaves a gap before it");
    expect = e.end;
  }
  ENGINE_REQUIRE(expect == data_size, "[load_safetensors] ", path, ": the data section has ", data_size,
                 " bytes but the tensors cover ", expect);
}

}  // namespace

StateDict load_safetensors(const std::string& path, Metadata* metadata) {
  // A folder opens as a stream with a nonsense size, and a FIFO waits for a writer for good.
  const std::string not_file = engine::not_a_file(path);
  ENGINE_REQUIRE(not_file.empty(), "[load_safetensors] cannot read ", path, not_file);
  std::ifstream in(path, std::ios::binary | std::ios::ate);
  ENGINE_REQUIRE(in.good(), "[load_safetensors] cannot open ", path, ": ", std::strerror(errno));
  const uint64_t file_size = uint64_t(in.tellg());
  in.seekg(0);
  ENGINE_REQUIRE(file_size >= 8, "[load_safetensors] ", path, " is too short (", file_size,
                 " bytes) to hold a safetensors header");
  // [8-byte little-endian header length n][n bytes of JSON][the data section]
  uint8_t len[8];
  in.read(reinterpret_cast<char*>(len), 8);
  ENGINE_REQUIRE(in.good(), "[load_safetensors] ", path, ": read error in the header's length");
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= uint64_t(len[i]) << (8 * i);
  ENGINE_REQUIRE(n <= file_size - 8 && n <= (uint64_t(100) << 20), "[load_safetensors] ", path, " declares a ", n,
                 "-byte header but holds ", file_size - 8, " bytes after the length (truncated or not safetensors)");
  std::string header(n, '\0');
  in.read(header.data(), std::streamsize(n));
  ENGINE_REQUIRE(in.good(), "[load_safetensors] ", path, ": read error in the header");
  const json root = parse_header(header, path);

  const uint64_t data_size = file_size - 8 - n;
  std::vector<Entry> entries;
  std::string sums_text;
  for (const auto& [name, v] : root.items()) {
    if (name == "__metadata__")
      read_metadata(v, path, metadata, &sums_text);
    else
      entries.push_back(parse_entry(name, v, data_size, path));
  }
  sort_and_check_tiling(entries, data_size, path);
  // A file of ours carries checksums (one written elsewhere has none, and is read as it is).
  const bool checked = !sums_text.empty();
  std::vector<uint32_t> sums;
  if (checked) {
    sums = parse_checksums(sums_text, entries.size(), path);
    check_header_checksum(root, sums[0], path);
  }
  // Everything checked: read the tensors.
  StateDict out;
  for (size_t i = 0; i < entries.size(); ++i) {
    const Entry& e = entries[i];
    Tensor t = empty(e.shape, e.dtype);
    in.seekg(std::streamoff(8 + n + e.begin));
    in.read(static_cast<char*>(t.storage()->data()), std::streamsize(e.end - e.begin));
    ENGINE_REQUIRE(in.good() || e.end == e.begin, "[load_safetensors] ", path, ": read error in tensor \"", e.name,
                   "\"");
    if (checked) check_tensor_checksum(e, t, sums[i + 1], path);
    out[e.name] = t;
  }
  return out;
}

void check_save_path(const std::string& path) {
  ENGINE_REQUIRE(!path.empty(), "[save_safetensors] the checkpoint path is empty");
  std::error_code ec;
  const std::filesystem::path folder = std::filesystem::absolute(path, ec).parent_path();
  ENGINE_REQUIRE(!ec && std::filesystem::is_directory(folder, ec), "[save_safetensors] cannot save to ", path,
                 ": the folder ", folder.string(), " does not exist; create it or choose another path");
  ENGINE_REQUIRE(!std::filesystem::is_directory(path, ec), "[save_safetensors] cannot save to ", path,
                 ": it is a folder");
  // A save renames a new file onto the name: a device there (`--checkpoint /dev/null`, the
  // usual way to ask for no output) would be replaced, for every program on the machine.
  const std::string special = engine::special_file_at(path);
  ENGINE_REQUIRE(special.empty(), "[save_safetensors] cannot save to ", path, ": it is ", special,
                 ", not a file, and a save would put a file in its place; give the path of a file");
  ENGINE_REQUIRE(::access(folder.c_str(), W_OK) == 0, "[save_safetensors] cannot save to ", path, ": the folder ",
                 folder.string(), " is not writable (", std::strerror(errno), ")");
}

namespace {
// The folder entry a save to `path` replaces: its folder, absolute, with ".", ".." and links
// resolved, and its own name as written. A save renames its temporary onto that entry, so
// a link or a hard link there is replaced, never written through.
std::filesystem::path save_target(const std::string& path) {
  namespace fs = std::filesystem;
  std::error_code ec;
  const fs::path p = fs::absolute(path, ec);
  const fs::path folder = fs::weakly_canonical(p.parent_path(), ec);
  return (ec ? p.parent_path().lexically_normal() : folder) / p.filename();
}
}  // namespace

void check_distinct_save_paths(const std::string& a, const std::string& what_a, const std::string& b,
                               const std::string& what_b) {
  const bool same = save_target(a) == save_target(b);
  ENGINE_REQUIRE(!same, "[save_safetensors] ", what_a, " and ", what_b, " both name ", a == b ? a : a + " (" + b + ")",
                 ": one save would replace the other; give them different paths");
}

}  // namespace engine::nn
